"""The "q · k" view (BertViz's neuron view): q, k and q ⊙ k of the chosen head for the chosen
token and a key, the server's numbers (POST /api/neuron), and the sum said in words."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from attnscope_live import post_json

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat. The cat"


@pytest.mark.parametrize("width", [1280, 390])
def test_q_k_and_their_product_are_the_servers(tab, width):
    page = tab.page
    page.set_viewport_size({"width": width, "height": 900})
    tab.open("/#view=neuron&layer=1&head=2&pos=8&text=" + quote(TEXT))
    page.wait_for_function("() => document.querySelector('[data-testid=neuron-plot]')?.data")
    served = post_json(tab.base_url + "/api/neuron", {"text": TEXT, "layer": 1, "head": 2, "query": 8})
    fig = tab.figure("neuron-plot")
    assert [trace["y"] for trace in fig["data"]] == [served["q"], served["k"], served["q_times_k"]]
    words = page.get_by_test_id("neuron-caption").inner_text()
    assert f"q·k = {served['attn_scores_raw']:.4f}" in words and f"the weight is {served['weight']:.4f}" in words
    # another key: a new answer, its numbers
    page.get_by_test_id("neuron-key").select_option("2")
    page.wait_for_function("() => window.attnscope.state.neuron?.response?.key === 2")
    tab.settle()
    other = post_json(tab.base_url + "/api/neuron", {"text": TEXT, "layer": 1, "head": 2, "query": 8, "key": 2})
    page.wait_for_function(f"() => document.querySelector('[data-testid=neuron-caption]').innerText.includes('{other['attn_scores_raw']:.4f}')")
    box = page.get_by_test_id("neuron-plot").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width
    assert not tab.unexpected_console_errors()
