"""The head heatmap drawn without Plotly (frontend/js/draw/canvasplot.js, canvashover.js; issue 31,
item 10): every cell sits where its axes say, is painted in the colour of the server's weight
or hatched where masked, and the pointer over it finds that cell and no other; at every size the page takes."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import post_json

pytestmark = pytest.mark.browser

SENTENCE = "The cat sat on the mat because the mat was warm."

CELLS = """async () => {
  const { pointAt } = await import('/js/draw/canvashover.js');
  const { scaleLUT } = await import('/js/draw/gridcanvas.js');
  const gd = document.querySelector('[data-testid=head-heatmap]');
  const canvas = gd.querySelector('.plot-cells');
  const g = canvas.getContext('2d');
  const ratio = canvas.width / gd.clientWidth;
  const xa = gd.plotAxes.xaxis, ya = gd.plotAxes.yaxis;
  const trace = gd.data[0];
  const lut = scaleLUT(trace.colorscale);
  const cells = [];
  for (let i = 0; i < trace.z.length; i++) for (let j = 0; j < trace.z[i].length; j++) {
    const x = xa.offset + xa.d2p(j), y = ya.offset + ya.d2p(i);
    const rgba = [...g.getImageData(Math.floor(x * ratio), Math.floor(y * ratio), 1, 1).data];
    const z = trace.z[i][j];
    const t = z === null ? null : (z - trace.zmin) / (trace.zmax - trace.zmin);
    const level = t === null ? null : Math.round(Math.min(1, Math.max(0, t)) * 255);
    const hit = pointAt(gd.figure, gd.plotAxes, x, y);
    cells.push({ i, j, z, rgba, want: level === null ? null : [...lut.subarray(level * 3, level * 3 + 3), 255],
                 hit: hit && [hit.trace.name ?? null, hit.i, hit.j] });
  }
  return cells;
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_every_cell_is_the_servers_weight_in_its_colour_and_the_pointer_finds_it(tab, width):
    tab.open_at(width, "/#view=head&text=" + quote(SENTENCE))
    cells = tab.page.evaluate(CELLS)
    layer, head = tab.page.evaluate("() => [window.attnscope.state.layer, window.attnscope.state.head]")
    answer = post_json(
        tab.base_url + "/api/attention",
        {"text": SENTENCE, "layers": [layer], "heads": [head], "include": ["pattern"], "top_k": 0},
    )
    pattern, mask = answer["layers"][0]["heads"][0]["pattern"], answer["mask"]
    assert len(cells) == len(pattern) ** 2
    for c in cells:
        i, j = c["i"], c["j"]
        if mask[i][j]:
            assert abs(c["z"] - pattern[i][j]) < 1e-3
            assert c["rgba"] == c["want"], c  # painted, in the weight's Viridis colour
            assert c["hit"] == [None, i, j]  # the weights' trace, this very cell
        else:
            # a gap over the stripes: their greys (MASK_BG to HATCH_INK), which no weight's colour is
            assert c["z"] is None and c["rgba"][3] == 255 and all(195 <= v <= 242 for v in c["rgba"][:3]), c
            assert c["hit"] == ["masked", i, j]  # the masked cells' trace says why
    assert tab.unexpected_console_errors() == []


def test_a_masked_cells_tooltip_says_why_and_leaving_removes_it(tab):
    tab.open("/#view=head&text=" + quote(SENTENCE))
    page = tab.page
    x, y = page.evaluate(
        """() => { const gd = document.querySelector('[data-testid=head-heatmap]');
                   gd.scrollIntoView({block: 'center'});
                   const xa = gd.plotAxes.xaxis, ya = gd.plotAxes.yaxis, box = gd.getBoundingClientRect();
                   return [box.left + xa.offset + xa.d2p(3), box.top + ya.offset + ya.d2p(1)]; }"""
    )
    page.mouse.move(x, y)
    tip = page.locator("[data-testid=head-heatmap] .hoverlayer .hovertext")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    labels = page.evaluate("() => window.attnscope.state.grid.response.tokens.slice(0, 4)")
    assert text.startswith(f"1 {labels[1]} → 3 {labels[3]}") and "masked" in text
    page.mouse.move(1, 1)
    tip.wait_for(state="detached")


def test_a_dragged_box_zooms_an_exact_head_and_a_double_click_shows_it_whole(tab):
    tab.open("/#view=head&text=" + quote(SENTENCE))
    page = tab.page
    point = """([i, j]) => { const gd = document.querySelector('[data-testid=head-heatmap]');
                 gd.scrollIntoView({block: 'center'});
                 const xa = gd.plotAxes.xaxis, ya = gd.plotAxes.yaxis, box = gd.getBoundingClientRect();
                 return [box.left + xa.offset + xa.d2p(j), box.top + ya.offset + ya.d2p(i)]; }"""
    before = tab.figure("head-heatmap")
    T = len(before["data"][0]["z"])
    position = page.evaluate("() => window.attnscope.state.position")
    x0, y0 = page.evaluate(point, [3, 1])
    x1, y1 = page.evaluate(point, [7, 4])
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=4)
    page.mouse.move(x1, y1, steps=4)
    page.mouse.up()
    page.wait_for_function("() => window.attnscope.state.zoom !== null")
    tab.settle()
    zoom = page.evaluate("() => window.attnscope.state.zoom")
    assert zoom == {"q0": 3, "q1": 8, "k0": 1, "k1": 5}
    fig = tab.figure("head-heatmap")
    assert fig["layout"]["xaxis"]["range"] == [0.5, 4.5] and fig["layout"]["yaxis"]["range"] == [7.5, 2.5]
    assert fig["data"][0]["z"] == before["data"][0]["z"]  # the same exact cells, fewer of them in view
    assert "Zoomed to queries 3–7 × keys 1–4" in page.get_by_test_id("head-zoom").inner_text()
    # the pointer still finds the cell under it at the zoomed scale
    x, y = page.evaluate(point, [5, 2])
    page.mouse.move(x, y)
    tip = page.locator("[data-testid=head-heatmap] .hoverlayer .hovertext")
    tip.wait_for(state="visible")
    labels = page.evaluate("() => window.attnscope.state.grid.response.tokens")
    assert tip.inner_text().startswith(f"5 {labels[5]} → 2 {labels[2]}")
    assert page.evaluate("() => window.attnscope.state.position") == position  # the drag chose no row
    page.mouse.dblclick(x, y)
    page.wait_for_function("() => window.attnscope.state.zoom === null")
    tab.settle()
    assert tab.figure("head-heatmap")["layout"]["xaxis"]["range"] == [-0.5, T - 0.5]
    assert page.get_by_test_id("head-zoom").is_hidden()
    assert tab.unexpected_console_errors() == []


def test_the_scores_wait_undecoded_for_the_hover_which_shows_the_servers(tab):
    """An exact head's raw and scaled scores are read by the tooltip alone: the redraw leaves them undecoded
    (wire.js), and the first hovered weight decodes them and shows the server's numbers for that cell."""
    tab.open("/#view=head&text=" + quote(SENTENCE))
    page = tab.page
    lazy = """() => { const h = window.attnscope.state.detail.response.layers[0].heads[0];
                      return ['attn_scores_raw', 'attn_scores'].map(
                        (k) => typeof Object.getOwnPropertyDescriptor(h, k).get === 'function'); }"""
    assert page.evaluate(lazy) == [True, True]
    i, j = 5, 2
    x, y = page.evaluate(
        """([i, j]) => { const gd = document.querySelector('[data-testid=head-heatmap]');
                   gd.scrollIntoView({block: 'center'});
                   const xa = gd.plotAxes.xaxis, ya = gd.plotAxes.yaxis, box = gd.getBoundingClientRect();
                   return [box.left + xa.offset + xa.d2p(j), box.top + ya.offset + ya.d2p(i)]; }""",
        [i, j],
    )
    page.mouse.move(x, y)
    tip = page.locator("[data-testid=head-heatmap] .hoverlayer .hovertext")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert page.evaluate(lazy) == [False, False]
    layer, head = page.evaluate("() => [window.attnscope.state.layer, window.attnscope.state.head]")
    answer = post_json(
        tab.base_url + "/api/attention",
        {"text": SENTENCE, "layers": [layer], "heads": [head], "include": ["attn_scores_raw", "attn_scores"]},
    )
    h = answer["layers"][0]["heads"][0]
    assert f"raw q·kᵀ {h['attn_scores_raw'][i][j]:.3f}" in text, text
    assert f"{h['attn_scores'][i][j]:.3f}" in text.split("raw q·kᵀ")[1], text
