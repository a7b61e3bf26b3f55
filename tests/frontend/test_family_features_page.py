"""The page on each family's own features, one module for all of them: the served model is a
parameter (conftest's ``family_server``, built in the test by tests/kit/family.py with q/k scaled up).

* gpt-oss (learned sinks): each head's sink is a column of its own beside the keys, holding the
  answer's `sink_mass`, and no caption says a row sums to 1;
* DeepSeek V3 (multi-head latent attention): the badge gives q/k and v their own sizes, and the
  hover splits each raw score into its content (no-RoPE) and position (RoPE) parts, the server's;
* DiffLlama (differential attention): a head's map, first − λ × second, is signed: drawn on a
  diverging scale centred on 0 with λ named, both softmaxes beneath it;
* Qwen3-Next (Gated DeltaNet in layers 0 and 2, drawn as implicit attention: test_implicit_page.py) and
  Llama 4 (a chunked layer, then one without RoPE): the ribbon names every layer as the model numbers it,
  only layers with heads are offered, a link to a layer without heads says so, a chunked layer's masked
  cells say why.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import post_json

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

SENTENCE = "The cat sat on the mat. The dog sat on the log, and the cat saw it."
MLA_SENTENCE = "The cat sat on the mat. The dog sat on the log."
HYBRIDS = ["qwen3_next", "llama4_text"]


def only_on(tab, kind: str, why: str):
    """``tab`` when its server's model is ``kind``; else the test is skipped, saying ``why``."""
    if tab.kind != kind:
        pytest.skip(why)
    return tab


# ---------------------------------------------------------------- learned sinks (gpt-oss)


@pytest.mark.parametrize("family_server", ["gpt_oss"], indirect=True)
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
    # the layer's number of this head stands beside it, the server's, as its field's row labels it
    layer = post_json(tab.base_url + "/api/attention", body)["layers"][0]
    label = next(
        f["label"] for f in tab.page.evaluate("() => window.attnscope.state.model.fields") if f["name"] == "sink_logit"
    )
    assert f"{label} {layer['sink_logit'][head]:.3f}" in tab.page.locator("#head-title").inner_text()
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("family_server", ["gpt_oss"], indirect=True)
def test_the_pipeline_says_rows_sum_to_one_minus_the_sinks_share(family_tab):
    tab = family_tab
    tab.open("/#view=pipeline&layer=1&head=3&text=" + quote(SENTENCE))
    words = tab.page.locator("#row-sums").inner_text()
    assert "learned attention sinks" in words and "1 − the sink's share" in words
    assert "every row sums to 1" not in tab.page.inner_text("body")
    assert not tab.unexpected_console_errors()


# ---------------------------------------------------------------- multi-head latent attention


@pytest.mark.parametrize("family_server", ["deepseek_v3"], indirect=True)
def test_the_hover_splits_each_raw_score_into_content_and_position(family_tab):
    tab = family_tab
    tab.open("/#layer=1&head=2&text=" + quote(MLA_SENTENCE))
    assert "d_k 12, d_v 8" in tab.page.get_by_test_id("model-info").inner_text()
    trace = tab.figure("head-heatmap")["data"][0]
    assert "= content %{customdata[4]:.3f} + position %{customdata[5]:.3f}" in trace["hovertemplate"]
    include = ["attn_scores_raw", "attn_scores_content", "attn_scores_position"]
    body = {"text": MLA_SENTENCE, "layers": [1], "heads": [2], "include": include, "top_k": 0}
    head = post_json(tab.base_url + "/api/attention", body)["layers"][0]["heads"][0]
    i, j = 6, 2  # a visible cell
    label_i, label_j, raw, _, content, position = trace["customdata"][i][j]
    assert [raw, content, position] == pytest.approx([head[n][i][j] for n in include], abs=1e-3)
    assert content + position == pytest.approx(raw, abs=2e-3)
    # the two parts are panels under the map, each the server's, on one diverging scale centred on 0
    assert tab.page.locator("#head-parts").is_visible()
    panels = tab.figure("head-parts")["data"]
    assert len(panels) == 2 and panels[0]["zmin"] == -panels[0]["zmax"] == panels[1]["zmin"]
    for drawn, name in zip(panels, include[1:]):
        assert drawn["zmid"] == 0
        assert drawn["z"][i][j] == pytest.approx(head[name][i][j], abs=1e-3)
        assert all(v is None for v in drawn["z"][2][3:])  # masked: after the query
    assert not tab.unexpected_console_errors()


# ---------------------------------------------------------------- differential attention


def served(tab, layer: int, head: int) -> tuple[dict, dict]:
    body = {"text": SENTENCE, "layers": [layer], "heads": [head], "include": ["pattern"], "top_k": 0}
    lv = post_json(tab.base_url + "/api/attention", body)["layers"][0]
    return lv, lv["heads"][0]


@pytest.mark.parametrize("family_server", ["diffllama"], indirect=True)
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


@pytest.mark.parametrize("family_server", ["diffllama"], indirect=True)
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


# ---------------------------------------------------------------- layers that differ


@pytest.mark.parametrize("family_server", HYBRIDS, indirect=True)
def test_the_ribbon_names_every_layer_and_only_attention_layers_have_heads(family_tab):
    tab = family_tab
    tab.open("/#text=" + quote(SENTENCE))
    page = tab.page
    chips = page.locator("[data-testid=layer-ribbon] .layer-chip")
    types = [chips.nth(i).get_attribute("data-type") for i in range(chips.count())]
    picker = [o.get_attribute("value") for o in page.locator("#layer-select option").all()]
    rows = page.evaluate(
        "() => document.querySelector('[data-testid=heads-grid]').gridLayout.grid.layers.map((l) => l.layer)"
    )
    if tab.kind == "qwen3_next":
        assert types == ["gated_deltanet", "full", "gated_deltanet", "full"]
        assert picker == ["1", "3"] and rows == [0, 1, 2, 3]  # the implicit layers' rows in the grid too
        implicit = page.locator("[data-testid=layer-ribbon] .layer-implicit")  # their heads not in the picker
        assert implicit.count() == 2 and "implicit attention" in implicit.first.get_attribute("title")
    else:
        assert types == ["chunked", "nope"]
        assert chips.first.inner_text() == "L0 chunked 4" and "floor_scale" in chips.nth(1).get_attribute("title")
        assert picker == ["0", "1"] and rows == [0, 1]
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("family_server", HYBRIDS, indirect=True)
def test_a_link_to_a_layer_without_heads_says_what_it_is(family_tab):
    tab = only_on(family_tab, "qwen3_next", "every layer of this model attends")
    tab.open("/#layer=2&head=1&text=" + quote(SENTENCE))
    page = tab.page
    notice = page.get_by_test_id("link-notice")
    assert notice.is_visible()
    assert "Layer 2 is a gated_deltanet layer, without softmax attention" in notice.inner_text()
    assert "implicit attention is drawn under the grid" in notice.inner_text()
    assert page.evaluate("() => [window.attnscope.state.layer, window.attnscope.state.head]") == [1, 1]
    # the head drawn is layer 1's, as the server numbers it
    fig = tab.figure("head-heatmap")
    body = {"text": SENTENCE, "layers": [1], "heads": [1], "include": ["pattern"], "top_k": 0}
    served = post_json(tab.base_url + "/api/attention", body)["layers"][0]["heads"][0]["pattern"]
    drawn = fig["data"][0]["z"]
    assert all(abs((d or 0) - s) < 1e-4 for rd, rs in zip(drawn, served) for d, s in zip(rd, rs))
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("family_server", HYBRIDS, indirect=True)
def test_a_chunked_layers_masked_cells_say_why(family_tab):
    tab = only_on(family_tab, "llama4_text", "no chunked layer in this model")
    tab.open("/#layer=0&head=0&text=" + quote(SENTENCE))
    fig = tab.figure("head-heatmap")
    masked = next(t for t in fig["data"] if t.get("name") == "masked")
    # query 5 and key 2: an earlier key, in the chunk before (chunks of 4 tokens: 0-3, 4-7, ...)
    assert masked["text"][5][2].startswith("masked: in an earlier chunk than the query (chunked attention: chunks of 4")
    assert masked["text"][5][7] == "masked: this key comes after the query"
    caption = tab.page.locator("#head-hatch-text").inner_text()
    assert "in an earlier chunk" in caption
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("family_server", HYBRIDS, indirect=True)
def test_effects_roles_and_continue_draw_the_layers_with_heads(family_tab):
    """Head effects, head roles and the Continue strip carry null for a hybrid's layers without
    heads: the page draws a row per layer with heads, named by its number, and a click opens it."""
    tab = only_on(family_tab, "qwen3_next", "every layer of this model attends")
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
        """() => document.querySelector('[data-testid=head-roles]')
            .emit('plotly_click', { points: [{ x: 'H0', y: 'L1' }] })"""
    )
    tab.settle()
    assert page.get_by_test_id("layer-select").input_value() == "1"
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("family_server", HYBRIDS, indirect=True)
def test_a_gated_head_shows_its_output_gate_beside_the_pattern(family_tab):
    """Qwen3-Next scales each head's output by a sigmoid gate: the pattern alone overstates what
    the head writes, so the gate of every query stands in a column of its own, the server's numbers."""
    tab = only_on(family_tab, "qwen3_next", "no output gates in this model")
    tab.open("/#layer=3&head=1&text=" + quote(SENTENCE))
    fig = tab.figure("head-heatmap")
    gate = next(t for t in fig["data"] if t.get("name") == "gate")
    body = {"text": SENTENCE, "layers": [3], "heads": [1], "include": ["pattern"], "top_k": 0}
    served = post_json(tab.base_url + "/api/attention", body)["layers"][0]["heads"][0]["gate"]
    assert [row[0] for row in gate["z"]] == pytest.approx(served, abs=1e-5)
    assert "output gate" in gate["hovertemplate"]
    assert not tab.unexpected_console_errors()
