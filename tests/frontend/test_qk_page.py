"""The "q · k" view (BertViz's neuron view): q, k and q ⊙ k of the chosen head for the chosen
token and a key, the server's numbers (POST /api/neuron), and the sum said in words."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import post_json

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat. The cat"


@pytest.mark.parametrize("width", [1280, 390])
def test_q_k_and_their_product_are_the_servers(tab, width):
    page = tab.page
    tab.open_at(width, "/#view=qk&layer=1&head=2&pos=8&text=" + quote(TEXT))
    fig = tab.drawn("qk-plot")
    served = post_json(tab.base_url + "/api/neuron", {"text": TEXT, "layer": 1, "head": 2, "query": 8})
    assert [trace["y"] for trace in fig["data"]] == [served["q"], served["k"], served["q_times_k"]]
    words = page.get_by_test_id("qk-caption").inner_text()
    assert f"q·k = {served['attn_scores_raw']:.4f}" in words and f"the weight is {served['weight']:.4f}" in words
    # another key: a new answer, its numbers
    page.get_by_test_id("qk-key").select_option("2")
    page.wait_for_function("() => window.attnscope.state.neuron?.response?.key === 2")
    tab.settle()
    other = post_json(tab.base_url + "/api/neuron", {"text": TEXT, "layer": 1, "head": 2, "query": 8, "key": 2})
    page.wait_for_function(
        "() => document.querySelector('[data-testid=qk-caption]').innerText"
        f".includes('{other['attn_scores_raw']:.4f}')"
    )
    assert tab.inside("qk-plot", width)
    assert not tab.unexpected_console_errors()


def test_a_shorter_text_keeps_the_key_inside_it(tab):
    """Issue 32, item 4: a key past the new text's end is clamped to its last token (as the query
    is), the picker shows it and the bars are the server's for it, never the old text's bars
    under an error."""
    page = tab.page
    long_text = "The cat sat on the mat. " * 5
    tab.open("/#view=qk&layer=1&head=2&text=" + quote(long_text))
    page.wait_for_function("() => document.querySelector('[data-testid=qk-plot]')?.data")
    page.get_by_test_id("qk-key").select_option("30")
    page.wait_for_function("() => window.attnscope.state.neuron?.response?.key === 30")
    short = "The cat sat"
    page.get_by_test_id("text-input").fill(short)
    page.get_by_test_id("text-input").press("Enter")
    page.wait_for_function(f"() => window.attnscope.state.text === {short!r}")
    tab.settle()
    T = len(tab.tokens())
    page.wait_for_function(f"() => window.attnscope.state.neuron?.response?.key === {T - 1}")
    tab.settle()
    assert page.get_by_test_id("qk-key").input_value() == str(T - 1)
    assert "Could not compute" not in page.get_by_test_id("qk-caption").inner_text()
    served = post_json(
        tab.base_url + "/api/neuron", {"text": short, "layer": 1, "head": 2, "query": T - 1, "key": T - 1}
    )
    assert [trace["y"] for trace in tab.figure("qk-plot")["data"]] == [
        served["q"],
        served["k"],
        served["q_times_k"],
    ]
    assert not tab.unexpected_console_errors()
