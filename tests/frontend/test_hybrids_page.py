"""The page on models whose layers differ: a hybrid (Qwen3-Next: linear attention in layers 0
and 2, softmax attention in 1 and 3) and Llama 4 (a chunked layer, then one without RoPE).

The ribbon over the grid names every layer as the model numbers it, the pickers offer only the
layers with heads, a link to a layer without heads says so, and a chunked layer's masked cells
say why. Random-weight models built in the test (tests/familykit.py), served by the real server.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from attnscope_live import post_json, serving

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.familykit import build  # noqa: E402

SENTENCE = "The cat sat on the mat. The dog sat on the log, and the cat saw it."


@pytest.fixture(scope="module", params=["qwen3_next", "llama4_text"])
def family_server(request, tmp_path_factory, server):
    with serving(build(request.param, tmp_path_factory.mktemp(request.param) / request.param), request.param) as s:
        yield s



def test_the_ribbon_names_every_layer_and_only_attention_layers_have_heads(family_tab):
    tab = family_tab
    tab.open("/#text=" + quote(SENTENCE))
    page = tab.page
    chips = page.locator("[data-testid=layer-ribbon] .layer-chip")
    types = [chips.nth(i).get_attribute("data-type") for i in range(chips.count())]
    picker = [o.get_attribute("value") for o in page.locator("#layer-select option").all()]
    rows = page.evaluate("() => document.querySelector('[data-testid=heads-grid]').gridLayout.grid.layers.map((l) => l.layer)")
    if tab.kind == "qwen3_next":
        assert types == ["linear", "full", "linear", "full"]
        assert picker == ["1", "3"] and rows == [1, 3]
        no_heads = page.locator("[data-testid=layer-ribbon] .layer-no-heads")
        assert no_heads.count() == 2 and "no heads to draw" in no_heads.first.get_attribute("title")
    else:
        assert types == ["chunked", "nope"]
        assert chips.first.inner_text() == "L0 chunked 4" and "floor_scale" in chips.nth(1).get_attribute("title")
        assert picker == ["0", "1"] and rows == [0, 1]
    assert not tab.unexpected_console_errors()


def test_a_link_to_a_layer_without_heads_says_what_it_is(family_tab):
    tab = family_tab
    if tab.kind != "qwen3_next":
        pytest.skip("every layer of this model attends")
    tab.open("/#layer=2&head=1&text=" + quote(SENTENCE))
    page = tab.page
    notice = page.get_by_test_id("link-notice")
    assert notice.is_visible()
    assert "Layer 2 is a linear layer, without softmax attention" in notice.inner_text()
    assert page.evaluate("() => [window.attnscope.state.layer, window.attnscope.state.head]") == [1, 1]
    # the head drawn is layer 1's, as the server numbers it
    fig = tab.figure("head-heatmap")
    body = {"text": SENTENCE, "layers": [1], "heads": [1], "include": ["pattern"], "top_k": 0}
    served = post_json(tab.base_url + "/api/attention", body)["layers"][0]["heads"][0]["pattern"]
    drawn = fig["data"][0]["z"]
    assert all(abs((d or 0) - s) < 1e-4 for rd, rs in zip(drawn, served) for d, s in zip(rd, rs))
    assert not tab.unexpected_console_errors()


def test_a_chunked_layers_masked_cells_say_why(family_tab):
    tab = family_tab
    if tab.kind != "llama4_text":
        pytest.skip("no chunked layer in this model")
    tab.open("/#layer=0&head=0&text=" + quote(SENTENCE))
    fig = tab.figure("head-heatmap")
    masked = next(t for t in fig["data"] if t.get("name") == "masked")
    # query 5 and key 2: an earlier key, in the chunk before (chunks of 4 tokens: 0-3, 4-7, ...)
    assert masked["text"][5][2].startswith("masked: in an earlier chunk than the query (chunked attention: chunks of 4")
    assert masked["text"][5][7] == "masked: this key comes after the query"
    caption = tab.page.locator("#head-hatch-text").inner_text()
    assert "in an earlier chunk" in caption
    assert not tab.unexpected_console_errors()


def test_effects_roles_and_continue_draw_the_layers_with_heads(family_tab):
    """Head effects, head roles and the Continue strip carry null for a hybrid's layers without
    heads: the page draws a row per layer with heads, named by its number, and a click opens it."""
    tab = family_tab
    if tab.kind != "qwen3_next":
        pytest.skip("every layer of this model attends")
    tab.open("/#text=" + quote(SENTENCE))
    page = tab.page
    page.get_by_test_id("effects-run").click()
    page.wait_for_function("() => document.querySelector('[data-testid=effects-heatmap]')?.data")
    assert tab.figure("effects-heatmap")["data"][0]["y"] == ["L1", "L3"]
    page.get_by_test_id("generate-count").fill("2")
    page.get_by_test_id("generate-run").click()
    page.wait_for_function("() => document.querySelector('[data-testid=generate]').dataset.reason !== undefined")
    assert page.get_by_test_id("generate-strip").is_visible()
    tab.open("/#view=roles&layer=3&head=2&text=" + quote(SENTENCE))
    page.wait_for_function("() => document.querySelector('[data-testid=head-roles]')?.data")
    fig = tab.figure("head-roles")
    assert fig["data"][0]["y"] == ["L1", "L3"]
    frame = fig["layout"]["shapes"][0]
    assert (frame["y0"], frame["x0"]) == (0.5, 1.5)  # row 1 of the two (layer 3), head 2
    # a click on the first row opens layer 1, by its label, not row 0
    page.evaluate(
        """() => document.querySelector('[data-testid=head-roles]').emit('plotly_click', { points: [{ x: 'H0', y: 'L1' }] })"""
    )
    tab.settle()
    assert page.get_by_test_id("layer-select").input_value() == "1"
    assert not tab.unexpected_console_errors()


def test_a_gated_head_shows_its_output_gate_beside_the_pattern(family_tab):
    """Qwen3-Next scales each head's output by a sigmoid gate: the pattern alone overstates what
    the head writes, so the gate of every query stands in a column of its own, the server's numbers."""
    tab = family_tab
    if tab.kind != "qwen3_next":
        pytest.skip("no output gates in this model")
    tab.open("/#layer=3&head=1&text=" + quote(SENTENCE))
    fig = tab.figure("head-heatmap")
    gate = next(t for t in fig["data"] if t.get("name") == "gate")
    body = {"text": SENTENCE, "layers": [3], "heads": [1], "include": ["pattern"], "top_k": 0}
    served = post_json(tab.base_url + "/api/attention", body)["layers"][0]["heads"][0]["gate"]
    assert [row[0] for row in gate["z"]] == pytest.approx(served, abs=1e-5)
    assert "output gate" in gate["hovertemplate"]
    assert not tab.unexpected_console_errors()
