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


def test_a_hybrids_grid_draws_both_kinds_of_layer_in_its_canvas(family_tab):
    """The grid names every layer: the softmax rows in the weights' colours, the implicit rows' signed thumbnails
    on the diverging scale (each layer's largest |M| at an end of it), with its own legend; a click on an
    implicit tile opens that head under the grid; at 1280 and at 390 px."""
    tab = family_tab
    for width in (1280, 390):
        tab.open_at(width, "/#text=" + quote(SENTENCE))
        tab.page.wait_for_function("() => document.querySelector('[data-testid=heads-grid]').gridLayout")
        seen = tab.page.evaluate(
            """async () => {
                const { scaleLUT } = await import('/js/draw/gridcanvas.js');
                const g = document.querySelector('[data-testid=heads-grid]').gridLayout;
                const { geom, cols } = g.layout;
                const ctx = document.getElementById('heads-grid-canvas').getContext('2d');
                const dpr = window.devicePixelRatio || 1;
                const pixel = (r, c, i, j) => {
                  const x = geom.label + c * geom.tile + (j + 0.5) * geom.scale;
                  const y = geom.label + r * geom.tile + (i + 0.5) * geom.scale;
                  return [...ctx.getImageData(Math.floor(x * dpr), Math.floor(y * dpr), 1, 1).data].slice(0, 3);
                };
                const viridis = scaleLUT('Viridis');
                return g.grid.layers.map((l, r) => {
                  let best = { v: 0 };
                  l.heads.forEach((h) => h.thumbnail.forEach((row, i) => row.forEach((v, j) => {
                    if (Math.abs(v) > Math.abs(best.v)) best = { v, c: cols.indexOf(h.head), i, j };
                  })));
                  const h0 = l.heads[0].thumbnail;
                  const level = l.implicit ? null : h0[h0.length - 1][0];
                  return {
                    layer: l.layer, implicit: !!l.implicit, mixer: l.mixer ?? null,
                    peak: l.implicit ? [Math.sign(best.v), pixel(r, best.c, best.i, best.j)] : null,
                    softmax: l.implicit ? null
                      : [pixel(r, 0, h0.length - 1, 0), [...viridis.slice(level * 3, level * 3 + 3)]],
                  };
                });
            }"""
        )
        assert [(row["layer"], row["implicit"]) for row in seen] == [(0, True), (1, False), (2, True), (3, False)]
        for row in seen:
            if row["implicit"]:
                assert row["mixer"] == "gated_deltanet"
                sign, rgb = row["peak"]
                assert rgb == ([178, 10, 28] if sign > 0 else [5, 10, 172])  # RdBu's ends, never Viridis
            else:
                assert row["softmax"][0] == row["softmax"][1]
        legend = tab.page.get_by_test_id("grid-signed-legend")
        assert legend.is_visible() and "implicit M" in legend.inner_text()
        caption = tab.page.get_by_test_id("grid-caption").inner_text()
        assert "L0 gated_deltanet, L2 gated_deltanet" in caption and "n/a" in caption
        assert tab.inside("heads-grid", width)
    x, y = grid_tile(tab, 2, 1)
    tab.page.mouse.click(x, y)
    tab.page.wait_for_function(
        "() => document.querySelector('[data-testid=implicit-caption]').innerText.startsWith('Layer 2, head 1')"
    )
    assert tab.page.get_by_test_id("implicit-pick").input_value() == "2:1"
    assert not tab.unexpected_console_errors()


def grid_tile(tab, layer: int, head: int) -> tuple[float, float]:
    """Page coordinates of the middle of the implicit tile of ``layer`` and ``head``."""
    tab.page.locator("#heads-grid-canvas").scroll_into_view_if_needed()
    return tab.page.evaluate(
        """([layer, head]) => {
            const g = document.querySelector('[data-testid=heads-grid]').gridLayout;
            const { geom, cols } = g.layout;
            const r = g.grid.layers.findIndex((l) => l.layer === layer && l.implicit), c = cols.indexOf(head);
            const box = document.getElementById('heads-grid-canvas').getBoundingClientRect();
            return [box.left + geom.label + (c + 0.5) * geom.tile, box.top + geom.label + (r + 0.5) * geom.tile];
        }""",
        [layer, head],
    )


@pytest.mark.parametrize("family_server", ["falcon_h1"], indirect=True)
def test_falcon_h1s_mamba2_rows_sit_under_their_attention_rows(family_tab):
    """Falcon-H1 runs Mamba-2 beside the attention of every layer: the grid holds both, the Mamba-2 row after its
    layer's attention row under the same number, and the ribbon names both mixers of each layer."""
    tab = family_tab
    tab.open("/#text=" + quote(SENTENCE))
    tab.page.wait_for_function("() => document.querySelector('[data-testid=heads-grid]').gridLayout")
    rows = tab.page.evaluate(
        "() => document.querySelector('[data-testid=heads-grid]').gridLayout.grid.layers"
        ".map((l) => [l.layer, !!l.implicit, l.mixer ?? null])"
    )
    assert rows == [[0, False, None], [0, True, "mamba2"], [1, False, None], [1, True, "mamba2"]]
    chips = tab.page.locator("[data-testid=layer-ribbon] .layer-chip")
    assert [chips.nth(i).inner_text() for i in range(chips.count())] == ["L0 full + mamba2", "L1 full + mamba2"]
    assert tab.page.evaluate("() => window.attnscope.state.implicit.body.mixers") == [0]
    tab.drawn("implicit-plot")
    assert not tab.unexpected_console_errors()
