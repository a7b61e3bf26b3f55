"""The page on a hybrid's value-linear layers (Qwen3-Next: Gated DeltaNet in layers 0 and 2): their implicit
heads are drawn under the grid on the page's diverging scale, centred on 0, holding the server's M, with the
reconstruction stated; at 1280 and at 390 px.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import post_json

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

FAMILY = "qwen3_next"
SENTENCE = "The cat sat on the mat. The dog sat on the log."


@pytest.mark.parametrize("width", [1280, 390])
def test_an_implicit_head_is_the_servers_m_on_the_diverging_scale(family_tab, width):
    tab = family_tab
    tab.open_at(width, "/#text=" + quote(SENTENCE))
    fig = tab.drawn("implicit-plot")
    trace = fig["data"][0]
    assert trace["colorscale"] == "RdBu" and trace["zmid"] == 0 and trace["zmin"] == -trace["zmax"]
    assert trace["colorbar"]["title"]["text"] == "M"  # the mixer row's colour bar title (model/fields.py)
    body = {"text": SENTENCE, "layers": [0], "include": ["pattern"], "top_k": 0}
    served = post_json(tab.base_url + "/api/attention", body)["layers"][0]
    assert served["implicit"] and served["mixer"] == "gated_deltanet"
    M = served["heads"][0]["pattern"]
    for t, row in enumerate(trace["z"]):
        for s, cell in enumerate(row):
            assert cell is None if s > t else cell == pytest.approx(M[t][s], abs=1e-6)
    assert max(abs(v) for row in trace["z"] for v in row if v is not None) == pytest.approx(trace["zmax"])
    caption = tab.page.get_by_test_id("implicit-caption").inner_text()
    assert "o_t = Σ_s M[t,s] v_s" in caption and "exact" in caption and "not a softmax" in caption
    assert "gated_deltanet layer" in caption  # the mixer row of the field table says it
    assert tab.inside("implicit-heads", width)
    assert not tab.unexpected_console_errors()


def test_another_implicit_head_is_drawn_when_picked(family_tab):
    tab = family_tab
    tab.open("/#text=" + quote(SENTENCE))
    tab.drawn("implicit-plot")
    pick = tab.page.get_by_test_id("implicit-pick")
    values = [o.get_attribute("value") for o in pick.locator("option").all()]
    assert values == ["0:0", "0:1", "2:0", "2:1"]  # every head of layers 0 and 2, by the model's numbers
    pick.select_option("2:1")
    tab.page.wait_for_function(
        "() => document.querySelector('[data-testid=implicit-caption]').innerText.includes('Layer 2')"
    )
    body = {"text": SENTENCE, "layers": [2], "include": ["pattern"], "top_k": 0}
    M = post_json(tab.base_url + "/api/attention", body)["layers"][0]["heads"][1]["pattern"]
    # only the chosen head's layer is asked for (a hybrid has dozens of implicit layers)
    assert tab.page.evaluate("() => window.attnscope.state.implicit.body.layers") == [2]
    z = tab.figure("implicit-plot")["data"][0]["z"]
    assert z[-1][0] == pytest.approx(M[-1][0], abs=1e-6)
    chips = tab.page.locator("[data-testid=layer-ribbon] .layer-implicit")
    assert chips.count() == 2 and "implicit attention" in chips.first.get_attribute("title")
