"""The page on a model with differential attention (DiffLlama): each head is a pair of softmaxes
and its map, first − λ × second, is signed. The head view draws it on a diverging scale centred
on 0 with λ named, both softmaxes beneath it, and no caption says a row sums to 1.

A random-weight DiffLlama built in the test (tests/familykit.py), served by the real server.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from attnscope_live import post_json

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

FAMILY = "diffllama"  # served by conftest's family_server
SENTENCE = "The cat sat on the mat. The dog sat on the log, and the cat saw it."


def served(tab, layer: int, head: int) -> tuple[dict, dict]:
    body = {"text": SENTENCE, "layers": [layer], "heads": [head], "include": ["pattern"], "top_k": 0}
    lv = post_json(tab.base_url + "/api/attention", body)["layers"][0]
    return lv, lv["heads"][0]


@pytest.mark.parametrize("layer,head", [(0, 1), (1, 0)])
def test_the_signed_map_is_drawn_on_a_diverging_scale_with_both_softmaxes(family_tab, layer, head):
    tab = family_tab
    tab.open(f"/#layer={layer}&head={head}&text=" + quote(SENTENCE))
    lv, hv = served(tab, layer, head)
    fig = tab.figure("head-heatmap")
    trace = fig["data"][0]
    # the answer's signed numbers, centred on 0, blue below and red above, the range symmetric
    assert trace["colorscale"] == "RdBu" and trace["zmid"] == 0 and trace["zmin"] == -trace["zmax"]
    z = [[v for v in row if v is not None] for row in trace["z"]]
    expected = [row[: i + 1] for i, row in enumerate(hv["pattern"])]
    assert z == [pytest.approx(row, abs=1e-5) for row in expected]
    assert min(min(row) for row in z) < 0  # negative cells: what the diverging scale is for
    assert trace["zmax"] == pytest.approx(max(abs(v) for row in z for v in row), abs=1e-6)
    lam = f"λ {lv['lambda']:.3f}"
    assert lam in fig["data"][0]["colorbar"]["title"]["text"] and lam in trace["hovertemplate"]
    # beneath it, the pair's two softmaxes on the weights' scale, each the answer's
    parts = tab.figure("head-parts")
    assert tab.page.locator("#head-parts").is_visible()
    for drawn, part in zip(parts["data"], hv["pattern_parts"]):
        assert drawn["zmin"] == 0 and drawn["zmax"] == 1
        assert [[v for v in row if v is not None] for row in drawn["z"]] == [
            pytest.approx(row[: i + 1], abs=1e-5) for i, row in enumerate(part)
        ]
    words = tab.page.locator("#head-rows").inner_text()
    assert "Differential attention" in words and "1 − λ" in words and lam in words
    assert "spreads 1 unit" not in words
    assert "|weight|" in tab.page.locator("#grid-caption").inner_text()
    assert "2 head pairs (differential)" in tab.page.get_by_test_id("model-info").inner_text()
    assert not tab.unexpected_console_errors()


def test_the_pipeline_is_the_first_softmax_and_says_so(family_tab):
    tab = family_tab
    tab.open("/#view=pipeline&layer=1&head=1&text=" + quote(SENTENCE))
    words = tab.page.locator("#row-sums").inner_text()
    assert "differential attention" in words and "first softmax" in words
    assert "every row sums to 1" in words  # the first softmax's rows do
    assert not tab.unexpected_console_errors()


def test_a_model_without_pairs_shows_no_parts(tab):
    tab.open("/#text=" + quote(SENTENCE))
    assert tab.page.locator("#head-parts").is_hidden()
    assert tab.figure("head-heatmap")["data"][0]["colorscale"] != "RdBu"
