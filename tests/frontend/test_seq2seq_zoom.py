"""Zooming in on a long cross map (a tiny BART built in the test, a source of about 300 tokens, a short target): the
map is T_target × S_source, its queries and keys counted apart (draw/zoom.js, draw/pooled.js `visibleBlock`), so a
box dragged over keys far past the target's length zooms there; the cells drawn in the box are the server's. At
1280 px the head comes exact (the heatmap has a cell a token) and the zoom narrows the axes; at 390 px it comes
max-pooled and the zoom asks for the block's exact cells (`focus.region`), drawn over the pooled ones."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import post_json, serving, wait_settled

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.seq2seq import build_seq2seq  # noqa: E402

SENTENCE = "The cat sat on the mat, and the dog saw the cat by the door. "
TARGET = "The dog sat on the mat."
HEATMAP = "document.querySelector('[data-testid=head-heatmap]')"


@pytest.fixture(scope="module")
def long_s2s(tmp_path_factory, server):
    folder = build_seq2seq("bart", tmp_path_factory.mktemp("bartlong") / "bart", max_position_embeddings=512)
    with serving(folder, "bart") as s:
        yield s


def source_text(base_url: str) -> tuple[str, int]:
    """A source of about 300 tokens (the server's count of them)."""
    text = SENTENCE * 15
    body = {"text": text, "target": TARGET, "stack": "cross", "layers": [], "include": [], "top_k": 0}
    return text, len(post_json(base_url + "/api/attention", body)["source_tokens"])


def drag(page, box: tuple[float, float, float, float]) -> None:
    """Drag over the fractions (fx0, fy0, fx1, fy1) of the heatmap's plot area."""
    page.evaluate(f"() => {HEATMAP}.scrollIntoView({{block: 'center'}})")
    points = page.evaluate(
        """([fx0, fy0, fx1, fy1]) => { const gd = """
        + HEATMAP
        + """; const r = gd.getBoundingClientRect();
        const xa = gd.plotAxes.xaxis, ya = gd.plotAxes.yaxis;
        const at = (fx, fy) => [r.left + xa.offset + fx * xa.length, r.top + ya.offset + fy * ya.length];
        return [at(fx0, fy0), at(fx1, fy1)]; }""",
        list(box),
    )
    (x0, y0), (x1, y1) = points
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=4)
    page.mouse.move(x1, y1, steps=4)
    page.mouse.up()


@pytest.mark.parametrize("width", [1280, 390])
def test_a_long_cross_map_zooms_on_its_keys(tab, long_s2s, width):
    tab.base_url = long_s2s.url
    page = tab.page
    text, S = source_text(long_s2s.url)
    assert S >= 280
    tab.open_at(width, f"/#stack=cross&text={quote(text)}&target={quote(TARGET)}")
    meta = page.evaluate(f"() => {HEATMAP}.layout.meta")
    T = page.evaluate("() => window.attnscope.state.detail.response.target_tokens.length")
    assert T < 20 and meta["tokens"] == T and meta["keys"] == S
    assert (meta["block"] > 1) == (width == 390)  # each width takes its own path: exact, then max-pooled
    # a box over the keys from 60% to 85% of the source, the query rows from the last up (the page's sticky bars
    # may cover the plot's top): far past the target's length
    drag(page, (0.85, 0.98, 0.6, 0.2))
    page.wait_for_function("() => window.attnscope.state.zoom !== null")
    zoom = page.evaluate("() => window.attnscope.state.zoom")
    assert T < zoom["k0"] < zoom["k1"] <= S and 0 <= zoom["q0"] < zoom["q1"] <= T
    assert abs(zoom["k0"] - 0.6 * S) <= 2 and abs(zoom["k1"] - 0.85 * S) <= 2
    layer, head = page.evaluate("() => [window.attnscope.state.layer, window.attnscope.state.head]")
    body = {"text": text, "target": TARGET, "stack": "cross", "layers": [layer], "heads": [head]}
    served = post_json(long_s2s.url + "/api/attention", {**body, "include": ["pattern"], "top_k": 0})
    pattern = served["layers"][0]["heads"][0]["pattern"]
    if meta["block"] == 1:
        # exact: the axes narrow to the box, and the cells in it are the server's
        wait_settled(page)
        fig = page.evaluate(f"() => ({{ z: {HEATMAP}.data[0].z, x: {HEATMAP}.layout.xaxis.range }})")
        assert fig["x"] == [zoom["k0"] - 0.5, zoom["k1"] - 0.5]
        cells = [
            (fig["z"][q][k], pattern[q][k])
            for q in range(zoom["q0"], zoom["q1"])
            for k in range(zoom["k0"], zoom["k1"])
        ]
    else:
        # pooled: the box's exact cells asked (focus.region) and drawn over the pooled ones
        page.wait_for_function(f"() => {HEATMAP}.data.some((t) => t.name === 'exact cells')", timeout=60_000)
        exact = page.evaluate(f"() => {HEATMAP}.data.find((t) => t.name === 'exact cells')")
        assert (exact["x0"], exact["y0"]) == (zoom["k0"], zoom["q0"])
        assert len(exact["z"]) == zoom["q1"] - zoom["q0"] and len(exact["z"][0]) == zoom["k1"] - zoom["k0"]
        source = served["source_tokens"]
        assert exact["customdata"][0][0][1] == f"{zoom['k0']} {source[zoom['k0']]}"  # the key named from the source
        cells = [
            (exact["z"][i][j], pattern[zoom["q0"] + i][zoom["k0"] + j])
            for i in range(len(exact["z"]))
            for j in range(len(exact["z"][0]))
        ]
        assert "Exact cells of" in page.get_by_test_id("head-zoom").inner_text()
    assert cells and all(abs(a - b) < 2e-3 for a, b in cells)  # the region comes as f2
    assert not tab.unexpected_console_errors()
