"""The page on an encoder–decoder (a tiny BART built in the test, served by the real server): the stack
picker (Encoder · Decoder · Cross, frontend/js/cards/stacks.js), the target beside the text with "Write it"
(frontend/js/cards/target.js), the cross heatmap with the source on the key axis and the target on the query
axis, the encoder's and the decoder's own masks, the Lines view's two columns, and Continue writing on the
target; the link keeps the stack and the target. At 1280 and 390 px, in one page per width."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import post_json, serving, wait_settled

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.seq2seq import build_seq2seq  # noqa: E402

TEXT = "The cat sat on the mat, and the dog saw the cat."
TARGET = "The dog sat on the mat."
STACKS = ("encoder", "decoder", "cross")


@pytest.fixture(scope="module")
def s2s_server(tmp_path_factory, server):
    with serving(build_seq2seq("bart", tmp_path_factory.mktemp("bart") / "bart"), "bart") as s:
        yield s


SIDES = """() => { const d = window.attnscope.state.detail.response;
  return { stack: d.stack, tokens: d.tokens, source: d.source_tokens, target: d.target_tokens }; }"""


def served_layer(tab, stack: str, target: str | None, layer: int) -> dict:
    """The server's own answer for one layer of `stack` (every head's pattern, plain JSON)."""
    body = {"text": TEXT, "stack": stack, "layers": [layer], "include": ["pattern"], "encoding": "json", "top_k": 0}
    return post_json(tab.base_url + "/api/attention", {**body, **({"target": target} if target else {})})


def pick(tab, stack: str) -> dict:
    """Click a stack in the picker and wait for its answer; the sides of the chosen head's answer."""
    tab.page.get_by_test_id(f"stack-{stack}").click()
    tab.page.wait_for_function(
        "(s) => window.attnscope.state.detail?.response?.stack === s && window.attnscope.settled", arg=stack
    )
    return tab.page.evaluate(SIDES)


def check_map(tab, sides: dict, stack: str) -> dict:
    """The chosen head's heatmap of `stack`: its rows the query side's tokens, its columns the key side's (the
    source for cross-attention), each axis named by its side, every cell the server's weight."""
    fig = tab.figure("head-heatmap")
    keys = sides["source"] if stack in ("encoder", "cross") else sides["target"]
    queries = sides["source"] if stack == "encoder" else sides["target"]
    assert sides["tokens"] == queries
    z = fig["data"][0]["z"]
    assert len(z) == len(queries) and all(len(row) == len(keys) for row in z)
    key_side = "target" if stack == "decoder" else "source"
    query_side = "source" if stack == "encoder" else "target"
    assert key_side in fig["layout"]["xaxis"]["title"]["text"]
    assert query_side in fig["layout"]["yaxis"]["title"]["text"]
    layer, head = tab.page.evaluate("() => [window.attnscope.state.layer, window.attnscope.state.head]")
    served = served_layer(tab, stack, tab.page.get_by_test_id("target-input").input_value(), layer)
    pattern = served["layers"][0]["heads"][head]["pattern"]
    assert all(abs(a - b) < 1e-4 for zr, pr in zip(z, pattern) for a, b in zip(zr, pr) if a is not None)
    return fig


@pytest.mark.parametrize("width", [1280, 390])
def test_stacks_target_cross_map_and_lines(tab, s2s_server, width):
    tab.base_url = s2s_server.url
    page = tab.page
    tab.open_at(width, "/#stack=cross&text=" + quote(TEXT))
    picker = page.get_by_test_id("stack-picker")
    assert picker.locator("[data-stack]").all_inner_texts() == ["Encoder", "Decoder", "Cross"]
    assert picker.locator("[aria-pressed=true]").inner_text() == "Cross"
    assert tab.inside("stack-picker", width) and tab.inside("target-field", width)
    # a blank target: the model wrote one; "Write it" puts the server's text of it in the field
    assert "written by the model" in page.get_by_test_id("target-note").inner_text()
    written = post_json(s2s_server.url + "/api/attention", {"text": TEXT, "layers": [], "include": [], "top_k": 0})
    assert written["target_generated"] is True
    page.get_by_test_id("target-write").click()
    page.wait_for_function("(t) => window.attnscope.state.target === t", arg=written["target"])
    wait_settled(page)
    assert page.get_by_test_id("target-input").input_value() == written["target"]
    assert "teacher-forced" in page.get_by_test_id("target-note").inner_text()
    # a typed target: the cross map is target × source
    page.get_by_test_id("target-input").fill(TARGET)
    page.wait_for_function(
        "(t) => window.attnscope.state.detail?.response?.target === t && window.attnscope.settled", arg=TARGET
    )
    sides = page.evaluate(SIDES)
    check_map(tab, sides, "cross")
    assert "Cross-attention" in page.locator("#head-rows").inner_text()
    # the encoder's map: source × source, nothing masked; the decoder's: target × target, a triangle
    assert "masked" not in [t.get("name") for t in check_map(tab, pick(tab, "encoder"), "encoder")["data"]]
    assert "masked" in [t.get("name") for t in check_map(tab, pick(tab, "decoder"), "decoder")["data"]]
    assert not page.get_by_test_id("causal-toggle").is_disabled()  # only the decoder has a causal mask
    sides = pick(tab, "cross")
    assert page.get_by_test_id("causal-toggle").is_disabled()
    # the link keeps the stack and the target
    page.wait_for_function("() => location.hash.includes('stack=cross') && location.hash.includes('target=')")
    assert f"target={quote(TARGET)}" in page.evaluate("() => location.hash").replace("+", "%20")
    # Lines: BertViz's two columns, the target's tokens left, the source's right, each line the server's weight
    page.locator("#tab-lines").click()
    svg = page.get_by_test_id("lines-svg")
    svg.locator("line").first.wait_for()
    assert svg.locator("text[data-column]").all_text_contents() == ["target", "source"]
    assert svg.locator("text[data-side=query]").count() == len(sides["target"])
    assert svg.locator("text[data-side=key]").count() == len(sides["source"])
    heads = served_layer(tab, "cross", TARGET, page.evaluate("() => window.attnscope.state.layer"))["layers"][0]
    for line in svg.locator("line").all()[:40]:
        h, q, k, w = (line.get_attribute(f"data-{n}") for n in ("head", "query", "key", "weight"))
        assert abs(heads["heads"][int(h)]["pattern"][int(q)][int(k)] - float(w)) < 1e-4
    assert "target token" in page.get_by_test_id("lines-caption").inner_text()
    # a selection: where target token 1 looks (bars over the source), who looks at source token 2 (over the target)
    svg.locator("text[data-side=query]").nth(1).click()
    svg.locator("text[data-side=key]").nth(2).click()
    page.wait_for_function("() => document.querySelector('[data-testid=lines-selection-plot]')?.data?.length === 2")
    bars = tab.figure("lines-selection-plot")["data"]
    assert [len(b["x"]) for b in bars] == [len(sides["source"]), len(sides["target"])]
    body = {"text": TEXT, "target": TARGET, "stack": "cross", "queries": [1], "keys": [2], "reduce": "mean"}
    layer, head = page.evaluate("() => [window.attnscope.state.layer, window.attnscope.state.head]")
    chosen = post_json(s2s_server.url + "/api/selection", {**body, "layer": layer, "head": head})
    assert bars[0]["y"] == chosen["from_queries"] and bars[1]["y"] == chosen["to_keys"]
    # the link reopens the same stack and target
    hash_ = page.evaluate("() => location.hash")
    page.goto("about:blank")
    tab.open_at(width, "/" + hash_)
    assert page.get_by_test_id("stack-picker").locator("[aria-pressed=true]").inner_text() == "Cross"
    assert page.get_by_test_id("target-input").input_value() == TARGET
    # Continue writes on the target (the text stays the source), its strip the new tokens' cross rows
    page.get_by_test_id("generate-count").fill("3")
    page.get_by_test_id("generate-run").click()
    page.wait_for_function("() => window.attnscope.state.generation?.running === false")
    wait_settled(page)
    got = page.evaluate(
        """() => { const s = window.attnscope.state; const l = s.layer, h = s.head;
        return { text: s.text, target: s.target, rows: s.generation.steps.map((st) => st.cross[l][h].length),
                 answered: s.detail.response.target, source: s.detail.response.source_tokens.length }; }"""
    )
    assert got["text"] == TEXT and got["target"] == page.get_by_test_id("target-input").input_value()
    assert got["rows"] and all(n == got["source"] for n in got["rows"]) and got["answered"] == got["target"]
    assert not tab.unexpected_console_errors()
    # lesson 1: encoder vs decoder, self vs cross, each a link to the loaded model's own stack
    tab.open("/lessons.html")
    note = page.get_by_test_id("lesson-model")
    note.wait_for(state="visible")
    assert "Encoder vs decoder" in note.inner_text() and "Self vs cross" in note.inner_text()
    assert [a.get_attribute("href") for a in note.locator("a").all()] == [f"./#view=head&stack={s}" for s in STACKS]
    # a link opens the explorer's head view at that stack
    note.locator("a").nth(2).click()
    page.wait_for_function("() => window.attnscope?.state?.view === 'head' && window.attnscope.state.stack === 'cross'")
    page.get_by_test_id("stack-picker").locator("[aria-pressed=true]").wait_for()
    assert page.get_by_test_id("stack-picker").locator("[aria-pressed=true]").inner_text() == "Cross"


@pytest.mark.parametrize("width", [1280, 390])
def test_attribution_draws_the_cross_heads_beside_the_self_heads(tab, s2s_server, width):
    """The Attribution view on the decoder: the answer's self heads in the first map, its cross heads in the
    second, every cell the server's, and the caption says the encoder's work enters only through the cross heads."""
    tab.base_url = s2s_server.url
    tab.open_at(width, "/#view=attribution&target=" + quote(TARGET) + "&text=" + quote(TEXT))
    own, cross = tab.drawn("attribution-heads"), tab.drawn("attribution-cross")
    position = tab.page.evaluate("() => window.attnscope.state.attribution.response.position")
    served = post_json(tab.base_url + "/api/attribution", {"text": TEXT, "target": TARGET, "position": position})
    assert position == len(served["target_ids"]) - 1
    assert own["data"][0]["z"] == served["heads"] and cross["data"][0]["z"] == served["cross_heads"]
    assert own["data"][0]["zmax"] == cross["data"][0]["zmax"]  # one colour range for both maps
    caption = tab.page.get_by_test_id("attribution-caption").inner_text()
    assert "cross heads" in caption and served["token"] in caption
    assert tab.inside("attribution-heads", width) and tab.inside("attribution-cross", width)
    # a cross head's cell opens that head in the cross stack, a self head's in the decoder's
    for testid, stack, layer, head in (("attribution-cross", "cross", 1, 3), ("attribution-heads", "decoder", 0, 2)):
        tab.page.evaluate(
            "([id, x, y]) => document.querySelector(`[data-testid=${id}]`).emit('plotly_click', {points: [{x, y}]})",
            [testid, f"H{head}", f"L{layer}"],
        )
        tab.page.wait_for_function(
            "([s, l, h]) => { const st = window.attnscope.state; return st.stack === s && st.layer === l && "
            "st.head === h; }",
            arg=[stack, layer, head],
        )
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", [1280, 390])
def test_why_on_the_cross_stack_and_patching_two_sources(tab, s2s_server, width):
    """The why box of a cross head: rows the decoder's terms, columns the encoder's (`key_components`), every term
    the server's; Patching reads the page's text and the second text as two sources with the one target."""
    tab.base_url = s2s_server.url
    page = tab.page
    link = f"&layer=1&head=2&target={quote(TARGET)}&text={quote(TEXT)}"
    tab.open_at(width, "/#stack=cross&click=why&why=3.7" + link)
    page.wait_for_function("() => document.querySelector('[data-testid=why-sums]')?.data")
    terms = tab.figure("why-plot")["data"][0]
    body = {"text": TEXT, "target": TARGET, "stack": "cross", "layer": 1, "head": 2, "query": 3, "key": 7}
    served = post_json(tab.base_url + "/api/qk-attribution", body)
    assert terms["y"] == served["components"] and terms["x"] == served["key_components"]
    assert terms["z"] == served["matrix"]
    assert "encoder's output" in page.get_by_test_id("why-caption").inner_text()
    other = "A dog ran to the door."
    tab.open_at(width, f"/#view=patching&stack=cross&textb={quote(other)}" + link)
    fig = tab.drawn("patch-plot")
    served = post_json(tab.base_url + "/api/patching", {"clean": TEXT, "corrupt": other, "target": TARGET,
                                                        "stack": "cross", "what": "heads"})
    assert fig["data"][0]["z"] == served["heads"] and served["corrupt_source_tokens"]
    assert tab.inside("patch-plot", width) and not tab.unexpected_console_errors()


GRID_SHAPE = """() => { const g = document.getElementById('heads-grid').gridLayout;
  if (!g || g.grid.stack !== window.attnscope.state.stack) return null;
  const t = g.grid.layers[0].heads[0].thumbnail, { tile, tileH } = g.layout.geom;
  return { rows: t.length, cols: t[0].length, tile, tileH,
    canvas: document.getElementById('heads-grid-canvas').getBoundingClientRect().width }; }"""


@pytest.mark.parametrize("width", [1280, 390])
def test_the_grid_draws_each_cross_tile_with_the_thumbnails_shape(tab, s2s_server, width):
    """A cross stack's thumbnails are target rows × source columns: each tile is drawn with that aspect (its
    height over its width the answer's rows over columns), the encoder's square, both inside the window."""
    tab.base_url = s2s_server.url
    page = tab.page
    for stack in ("cross", "encoder"):
        tab.open_at(width, f"/#stack={stack}&target=" + quote(TARGET) + "&text=" + quote(TEXT))
        page.wait_for_function(GRID_SHAPE)
        got = page.evaluate(GRID_SHAPE)
        served = served_layer(tab, stack, TARGET, 0)
        assert got["rows"] == len(served["target_ids" if stack == "cross" else "source_ids"])
        assert got["cols"] == len(served["source_ids"])
        drawn = (got["tileH"] - 1) / (got["tile"] - 1)
        assert drawn == pytest.approx(got["rows"] / got["cols"], abs=1.0 / (got["tile"] - 1))
        assert (got["rows"] < got["cols"]) == (stack == "cross") and got["canvas"] <= width
        assert got["tileH"] >= 5
    assert not tab.unexpected_console_errors()
