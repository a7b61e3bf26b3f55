"""The page on a model with learned attention sinks (gpt-oss): each head's sink is a column of its
own beside the keys, holding the answer's `sink_mass`, and no caption says a row sums to 1.

A random-weight gpt-oss built in the test (tests/familykit.py: sink logits from −1 to 3, so the
heads give the sink from almost nothing to most of a row), served by the real server.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from attnscope_live import post_json

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

FAMILY = "gpt_oss"  # served by conftest's family_server
SENTENCE = "The cat sat on the mat. The dog sat on the log, and the cat saw it."


@pytest.mark.parametrize("head", [0, 3])
def test_the_sink_is_a_column_of_its_own_holding_the_answers_share(family_tab, head):
    tab = family_tab
    tab.open(f"/#layer=1&head={head}&text=" + quote(SENTENCE))
    fig = tab.figure("head-heatmap")
    sink = next(t for t in fig["data"] if t.get("name") == "sink")
    assert fig["layout"]["xaxis2"]["ticktext"] == ["sink"]
    body = {"text": SENTENCE, "layers": [1], "heads": [head], "include": ["pattern"], "top_k": 0}
    served = post_json(tab.base_url + "/api/attention", body)["layers"][0]["heads"][0]
    assert [row[0] for row in sink["z"]] == pytest.approx(served["sink_mass"], abs=1e-5)
    # the keys' weights and the sink's share make each row whole, and the caption says so
    for row, mass in zip(served["pattern"], served["sink_mass"]):
        assert sum(row) + mass == pytest.approx(1, abs=1e-4)
    assert "and this layer's learned sink" in tab.page.locator("#head-rows").inner_text()
    assert not tab.unexpected_console_errors()


def test_the_pipeline_says_rows_sum_to_one_minus_the_sinks_share(family_tab):
    tab = family_tab
    tab.open("/#view=pipeline&layer=1&head=3&text=" + quote(SENTENCE))
    words = tab.page.locator("#row-sums").inner_text()
    assert "learned attention sinks" in words and "1 − the sink's share" in words
    assert "every row sums to 1" not in tab.page.inner_text("body")
    assert not tab.unexpected_console_errors()
