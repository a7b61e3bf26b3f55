"""The explorer page in a real browser against the real server."""

from __future__ import annotations

import csv
import json
import math
import struct
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote
from xml.etree import ElementTree

import pytest

from tests.kit.live import FILLER, post_json, text_of_tokens

pytestmark = pytest.mark.browser

SENTENCE = "The cat sat on the mat because the mat was warm."


def type_text(tab, text: str) -> None:
    box = tab.page.get_by_test_id("text-input")
    box.fill("")
    box.press_sequentially(text)
    tab.settle()


def server_tokens(tab, text: str) -> list[str]:
    body = {"text": text, "layers": [0], "heads": [0], "include": ["stats"], "top_k": 0}
    return post_json(tab.base_url + "/api/attention", body)["tokens"]


def test_typing_a_sentence_draws_a_token_by_token_heatmap(tab):
    tab.open("/")
    type_text(tab, SENTENCE)
    expected = server_tokens(tab, SENTENCE)
    assert tab.tokens() == expected

    fig = tab.figure("head-heatmap")
    z = fig["data"][0]["z"]
    T = len(expected)
    assert len(z) == T and all(len(row) == T for row in z)
    # keys across the top, queries down the side, both labelled with the tokens
    assert fig["layout"]["xaxis"]["ticktext"] == expected
    assert fig["layout"]["yaxis"]["ticktext"] == expected
    assert fig["layout"]["yaxis"]["range"][0] > fig["layout"]["yaxis"]["range"][1]  # row 0 at the top
    # causal: the upper triangle is masked (gaps, drawn hatched), every row of weights sums to 1
    for i, row in enumerate(z):
        assert all(v is None for v in row[i + 1 :])
        assert math.isclose(sum(v for v in row[: i + 1]), 1.0, abs_tol=2e-3)
    assert fig["layout"]["images"], "masked cells need the hatched background"


def test_changing_the_head_redraws_the_head_view(tab):
    tab.open("/#text=" + quote(SENTENCE))
    before = tab.figure("head-heatmap")["data"][0]
    tab.page.get_by_test_id("head-select").select_option("2")
    tab.page.get_by_test_id("layer-select").select_option("1")
    tab.settle()
    after = tab.figure("head-heatmap")["data"][0]
    assert "L1 · H2" in after["hovertemplate"]
    assert after["z"] != before["z"]
    assert tab.page.locator("#head-title").inner_text() == "Layer 1 · head 2"
    # the detail answer adds the raw and scaled scores to the hover
    assert "raw q·k" in after["hovertemplate"]
    tab.page.wait_for_function("() => location.hash.includes('layer=1') && location.hash.includes('head=2')")


def grid_tile_center(tab, layer: int, head: int) -> tuple[float, float]:
    """Page coordinates of the middle of a head's tile in the grid canvas, scrolled into view first
    (as a user scrolls to it: below the grid's caption and cards it may start under the fold)."""
    tab.page.locator("#heads-grid-canvas").scroll_into_view_if_needed()
    return tab.page.evaluate(
        """([layer, head]) => {
            const g = document.querySelector('[data-testid=heads-grid]').gridLayout;
            const { geom, cols } = g.layout;
            const r = g.grid.layers.findIndex((l) => l.layer === layer), c = cols.indexOf(head);
            const box = document.getElementById('heads-grid-canvas').getBoundingClientRect();
            return [box.left + geom.label + (c + 0.5) * geom.tile, box.top + geom.label + (r + 0.5) * geom.tile];
        }""",
        [layer, head],
    )


def contrast(fg: str, bg: str) -> float:
    """WCAG contrast ratio of two CSS rgb() colours."""

    def lum(css: str) -> float:
        r, g, b = (int(v) / 255 for v in css[css.index("(") + 1 : css.index(")")].split(",")[:3])
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((lum(fg), lum(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_clicking_a_grid_cell_selects_that_head(tab):
    tab.open("/#text=" + quote(SENTENCE))
    layout = tab.page.evaluate(
        "() => { const g = document.querySelector('[data-testid=heads-grid]').gridLayout;"
        " return {rows: g.grid.layers.map((l) => l.layer), cols: g.layout.cols}; }"
    )
    assert layout == {"rows": [0, 1, 2, 3], "cols": [0, 1, 2, 3]}
    x, y = grid_tile_center(tab, 2, 3)
    tab.page.mouse.move(x, y)
    tip = tab.page.locator("#grid-tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert text.startswith("Layer 2 · head 3") and "click to open" in text
    style = tip.evaluate("(el) => [getComputedStyle(el).color, getComputedStyle(el).backgroundColor]")
    assert contrast(*style) >= 4.5
    tab.page.mouse.click(x, y)
    tab.settle()
    assert tab.page.get_by_test_id("layer-select").input_value() == "2"
    assert tab.page.get_by_test_id("head-select").input_value() == "3"
    assert "L2 · H3" in tab.figure("head-heatmap")["data"][0]["hovertemplate"]
    # arrow keys on the grid move between heads
    tab.page.locator("#heads-grid-canvas").focus()
    tab.page.keyboard.press("ArrowLeft")
    tab.settle()
    assert tab.page.get_by_test_id("head-select").input_value() == "2"


def test_a_masked_grid_cell_says_masked(tab):
    tab.open("/#text=" + quote(SENTENCE))
    # the first query's second key, masked under the causal mask (the tile's top-right corner
    # holds the head's switch-off toggle)
    tab.page.locator("#heads-grid-canvas").scroll_into_view_if_needed()
    x, y = tab.page.evaluate(
        """() => {
            const g = document.querySelector('[data-testid=heads-grid]').gridLayout;
            const { geom } = g.layout;
            const box = document.getElementById('heads-grid-canvas').getBoundingClientRect();
            return [box.left + geom.label + 1.5 * geom.scale, box.top + geom.label + 0.5 * geom.scale];
        }"""
    )
    tab.page.mouse.move(x, y)
    tip = tab.page.locator("#grid-tip")
    tip.wait_for(state="visible")
    assert "masked" in tip.inner_text() and "weight" not in tip.inner_text()


def test_scaling_view_shows_both_patterns_and_a_variance_ratio_of_d_k(tab):
    tab.open("/#text=" + quote(SENTENCE))
    tab.page.get_by_role("tab", name="Scaled vs unscaled").click()
    tab.settle()
    scaled = tab.figure("scaling-scaled")["data"][0]
    unscaled = tab.figure("scaling-unscaled")["data"][0]
    T = len(tab.tokens())
    assert len(scaled["z"]) == T and len(unscaled["z"]) == T
    assert scaled["z"] != unscaled["z"]
    # one colour scale for both
    assert (scaled["zmin"], scaled["zmax"]) == (unscaled["zmin"], unscaled["zmax"]) == (0, 1)
    head_dim = json.loads(urllib.request.urlopen(tab.base_url + "/api/model", timeout=30).read())["head_dim"]
    assert head_dim == 32
    ratio_row = tab.page.locator("[data-testid=stats-table] tr[data-stat=variance_ratio]")
    cells = ratio_row.locator("td").all_inner_texts()
    assert math.isclose(float(cells[0]), head_dim, abs_tol=0.01)
    assert f"d_k = {head_dim}" in cells[2]
    entropy = tab.figure("scaling-entropy")["data"]
    assert len(entropy) == 3 and all(len(t["y"]) == T for t in entropy)


def test_turning_the_causal_mask_off_puts_weight_above_the_diagonal(tab):
    tab.open("/#text=" + quote(SENTENCE))
    banner = tab.page.get_by_test_id("whatif-banner")
    assert banner.is_hidden()
    tab.page.locator("label[for=causal-toggle]").click()
    tab.settle()
    z = tab.figure("head-heatmap")["data"][0]["z"]
    above = [v for i, row in enumerate(z) for v in row[i + 1 :]]
    assert above and all(v is not None for v in above)
    assert sum(above) > 0.1
    assert banner.is_visible()
    assert "not what it computes" in banner.inner_text()
    tab.page.wait_for_function("() => location.hash.includes('causal=0')")
    tab.page.locator("label[for=causal-toggle]").click()
    tab.settle()
    z = tab.figure("head-heatmap")["data"][0]["z"]
    assert all(v is None for i, row in enumerate(z) for v in row[i + 1 :])
    assert banner.is_hidden()


def test_scaling_off_is_a_labelled_what_if(tab):
    tab.open("/#view=scaling&text=" + quote(SENTENCE))
    tab.page.locator("label[for=scale-toggle]").click()
    tab.settle()
    assert "Scaling removed" in tab.page.get_by_test_id("whatif-banner").inner_text()
    ratio = tab.page.locator("[data-testid=stats-table] tr[data-stat=variance_ratio] td").first.inner_text()
    assert math.isclose(float(ratio), 1.0, abs_tol=0.01)


def test_a_text_over_the_context_is_said_in_plain_words_and_keeps_the_picture(tab):
    # an empty box, or one of only spaces, is no error: it shows the empty state (test_page_behaviour.py)
    tab.open("/#text=" + quote(SENTENCE))
    before = tab.figure("head-heatmap")["data"][0]["z"]
    text = FILLER * 6
    tab.refusal(text)  # the server refuses it
    box = tab.page.get_by_test_id("text-input")
    box.fill(text)
    box.press("Enter")
    tab.settle()
    banner = tab.page.get_by_test_id("error-banner")
    assert banner.is_visible()
    assert "this model reads at most 256" in banner.inner_text()
    # the chips of the old text go; the last picture stays instead of going blank
    assert tab.tokens() == []
    assert tab.page.locator("#token-count").inner_text().endswith("tokens · at most 256")
    assert tab.figure("head-heatmap")["data"][0]["z"] == before
    # a good text clears the banner
    box.fill(SENTENCE)
    box.press("Enter")
    tab.settle()
    assert banner.is_hidden()
    assert tab.unexpected_console_errors(allowed=("status of 422",)) == []


def test_a_link_reopens_the_same_picture(tab):
    tab.open("/#" + "&".join([f"text={quote(SENTENCE)}", "layer=3", "head=1", "view=variance"]))
    assert tab.page.get_by_test_id("text-input").input_value() == SENTENCE
    assert tab.page.get_by_test_id("layer-select").input_value() == "3"
    assert tab.page.get_by_test_id("head-select").input_value() == "1"
    assert tab.page.get_by_role("tab", name="Variance").get_attribute("aria-selected") == "true"
    hist = tab.figure("variance-hist")["data"]
    assert [t["type"] for t in hist] == ["histogram", "histogram"]
    T = len(tab.tokens())
    assert len(hist[0]["x"]) == T * (T + 1) // 2  # every unmasked raw score


def test_a_token_chip_chooses_the_position_whose_predictions_are_shown(tab):
    tab.open("/#text=" + quote(SENTENCE))
    chips = tab.page.locator("[data-testid=tokens] .chip")
    chips.nth(1).click()
    title = tab.page.locator("#predictions-title")
    assert "position 1" in title.inner_text()
    items = tab.page.locator("[data-testid=predictions] li")
    assert items.count() == 10
    assert chips.nth(1).get_attribute("aria-pressed") == "true"
    # the chosen query row is outlined in the head view
    shapes = tab.figure("head-heatmap")["layout"]["shapes"]
    assert shapes and shapes[0]["y0"] == 0.5


def test_the_full_context_stays_usable(tab):
    long_text = FILLER * 6
    tab.open("/")
    # the longest prefix of the filler that fits: trim at whitespace until the server accepts it
    for cut in range(len(long_text), 0, -40):
        try:
            n = len(server_tokens(tab, long_text[:cut]))
        except urllib.error.HTTPError:
            continue
        long_text = long_text[:cut]
        break
    assert n > 200
    tab.page.get_by_test_id("text-input").fill(long_text)
    tab.settle()
    fig = tab.figure("head-heatmap")
    assert len(fig["data"][0]["z"]) == n
    assert len(fig["layout"]["xaxis"]["ticktext"]) <= 45  # thinned labels
    info = tab.page.evaluate(
        "() => { const g = document.querySelector('[data-testid=heads-grid]').gridLayout;"
        " return {n: g.grid.layers.length * g.layout.cols.length, size: g.layout.size,"
        " block: g.grid.thumbnail.block}; }"
    )
    assert info["n"] == 16 and info["size"] <= 64 and info["block"] == math.ceil(n / 64)  # pooled on the server
    caption = tab.page.get_by_test_id("grid-caption").inner_text()
    assert f"downsampled {info['block']}×" in caption and f"{n} tokens" in caption
    assert tab.page.get_by_test_id("error-banner").is_hidden()


def test_no_request_leaves_the_server_and_the_console_stays_clean(tab):
    tab.open("/#text=" + quote(SENTENCE))
    for name in ["Scaled vs unscaled", "Mask pipeline", "Variance", "Head roles", "Head & grid"]:
        tab.page.get_by_role("tab", name=name).click()
        tab.settle()
    tab.page.locator("label[for=causal-toggle]").click()
    tab.settle()
    with tab.page.expect_download():
        tab.page.locator("#download-csv").click()
    tab.open("/lessons.html")
    tab.page.wait_for_selector("[data-testid=bow-agree][data-agree]")
    tab.page.wait_for_selector("#variance-sweep.drawn")
    assert tab.requests
    outside = [u for u in tab.requests if not (u.startswith(tab.base_url + "/") or u.startswith(("data:", "blob:")))]
    assert outside == []
    assert tab.console_errors == []


def test_every_hook_is_on_the_page(tab):
    tab.open("/#text=" + quote(SENTENCE))
    for testid in [
        "text-input",
        "tokens",
        "layer-select",
        "head-select",
        "head-heatmap",
        "heads-grid",
        "scaling-scaled",
        "scaling-unscaled",
        "stats-table",
        "mask-steps",
        "variance-hist",
        "predictions",
        "head-roles",
        "causal-toggle",
        "scale-toggle",
        "error-banner",
    ]:
        assert tab.page.get_by_test_id(testid).count() == 1, testid
    # each view draws its figures when shown
    for name, testid in [("Mask pipeline", "mask-steps"), ("Head roles", "head-roles")]:
        tab.page.get_by_role("tab", name=name).click()
        tab.settle()
        tab.page.wait_for_function(f"() => document.querySelector('[data-testid={testid}]').data !== undefined")
    steps = tab.figure("mask-steps")["data"]
    T = len(tab.tokens())
    sums = steps[4]["z"]
    assert len(sums) == T and all(math.isclose(s[0], 1.0, abs_tol=2e-3) for s in sums)


def test_controls_have_names_and_are_reachable_by_keyboard(tab):
    tab.open("/#text=" + quote(SENTENCE))
    unnamed = tab.page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea, button')]
            .filter((el) => el.offsetParent !== null)
            .filter((el) => {
                const label = el.labels && el.labels.length ? el.labels[0].textContent.trim() : '';
                const name = label || el.getAttribute('aria-label') || el.textContent.trim() || el.title;
                return !name;
            })
            .map((el) => el.outerHTML.slice(0, 80))"""
    )
    assert unnamed == []
    # Tab from the text box walks through the examples and reaches the head controls
    tab.page.get_by_test_id("text-input").focus()
    reached = set()
    for _ in range(60):
        tab.page.keyboard.press("Tab")
        reached.add(tab.page.evaluate("() => document.activeElement.id || document.activeElement.className"))
        if {"layer-select", "head-select", "causal-toggle", "scale-toggle"} <= reached:
            break
    assert {"layer-select", "head-select", "causal-toggle", "scale-toggle"} <= reached
    # arrow keys move between the view tabs
    tab.page.get_by_role("tab", name="Head & grid").focus()
    tab.page.keyboard.press("ArrowRight")
    assert tab.page.get_by_role("tab", name="Lines").get_attribute("aria-selected") == "true"
    tab.page.keyboard.press("ArrowRight")
    assert tab.page.get_by_role("tab", name="Scaled vs unscaled").get_attribute("aria-selected") == "true"


def test_token_hover_text_after_an_emoji_is_the_token_itself(tab):
    text = "Party 🎉 for everyone"
    tab.open("/#text=" + quote(text))
    titles = tab.page.locator("[data-testid=tokens] .chip").evaluate_all("(els) => els.map((e) => e.title)")
    tokens = tab.tokens()
    i = tokens.index("␣for")
    assert titles[i].endswith(': " for"'), titles[i]


def test_plot_tooltips_are_readable(tab):
    tab.open("/#text=" + quote(SENTENCE))
    for testid in ("head-heatmap",):
        label = tab.figure(testid)["layout"]["hoverlabel"]
        fg, bg = label["font"]["color"], label["bgcolor"]
        rgb = lambda h: f"rgb({int(h[1:3], 16)}, {int(h[3:5], 16)}, {int(h[5:7], 16)})"  # noqa: E731
        assert contrast(rgb(fg), rgb(bg)) >= 4.5


def test_a_role_cell_opens_its_head_and_the_roles_are_not_a_what_if(tab):
    tab.open("/#text=" + quote(SENTENCE))
    tab.page.get_by_role("tab", name="Head roles").click()
    tab.page.wait_for_function("() => document.querySelector('[data-testid=head-roles]').data !== undefined")
    fig = tab.figure("head-roles")
    hover = fig["data"][0]["hovertemplate"]
    assert hover.startswith("%{y} · %{x}")  # the axis labels already read "L2" and "H1"
    # the what-ifs do not change role scores: the tab is not marked as one
    tab.page.get_by_test_id("causal-toggle").uncheck()
    tab.settle()
    assert "what-if" not in (tab.page.evaluate("() => document.body.className") or "")
    assert "measured on the trained model" in tab.page.locator("#whatif-text").inner_text()
    # a click on a cell opens that head in the head view
    tab.page.evaluate(
        """() => { const gd = document.querySelector('[data-testid=head-roles]');
                   gd.emit('plotly_click', { points: [{ x: 3, y: 2 }] }); }"""
    )
    tab.settle()
    assert tab.page.get_by_test_id("layer-select").input_value() == "2"
    assert tab.page.get_by_test_id("head-select").input_value() == "3"
    assert tab.page.locator("#view-head").is_visible()
    tab.page.get_by_test_id("causal-toggle").check()
    tab.settle()


def test_the_json_export_holds_the_whole_answer(tab):
    tab.open("/#text=" + quote(SENTENCE))
    with tab.page.expect_download() as info:
        tab.page.locator("#download-json").click()
    data = json.loads(Path(info.value.path()).read_text())
    assert len(data["layers"]) == 4 and all(len(lv["heads"]) == 4 for lv in data["layers"])
    head = data["layers"][2]["heads"][1]
    assert {"pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled", "stats", "q", "k", "v"} <= set(head)
    assert all(len(row) == 10 for row in data["predictions"])


def test_the_grid_exports_as_one_png(tab):
    tab.open("/#text=" + quote(SENTENCE))
    with tab.page.expect_download() as info:
        tab.page.locator("#grid-png").click()
    blob = Path(info.value.path()).read_bytes()
    assert info.value.suggested_filename == "attnscope-all-heads.png"
    assert blob[:8] == b"\x89PNG\r\n\x1a\n" and len(blob) > 2000


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("scaled", [True, False])
def test_every_caption_is_true_in_every_what_if(tab, causal, scaled):
    flags = ("" if causal else "&causal=0") + ("" if scaled else "&scale=none")
    tab.open(f"/#view=pipeline{flags}&text=" + quote(SENTENCE))
    notes = tab.page.locator("#pipeline-notes li").all_inner_texts()
    assert len(notes) == 4 and all(notes)
    joined = " ".join(notes)
    assert ("exactly 0" in joined) == causal
    assert ("set to −∞ (hatched)" in joined) == causal
    assert ("stays soft" in joined) == scaled
    assert notes[1].startswith("÷ 1 (what-if") != scaled
    tab.page.get_by_role("tab", name="Scaled vs unscaled").click()
    tab.settle()
    left = tab.page.locator("#scaling-left-caption").inner_text()
    assert (left == "what the model computes") == (causal and scaled)
    if not scaled:
        assert "same as the right panel" in left
    tab.page.get_by_role("tab", name="Variance", exact=True).click()
    tab.settle()
    names = [t["name"] for t in tab.figure("variance-hist")["data"]]
    assert ("what-if" in names[1]) != scaled and names[1].startswith("scaled") == scaled
    banner = tab.page.get_by_test_id("whatif-banner")
    assert banner.is_visible() == (not (causal and scaled))


def test_a_click_on_the_hatched_part_of_a_row_chooses_it(tab):
    tab.open("/#text=" + quote(SENTENCE))
    # the far right of row 1: keys after the query, masked and hatched
    x, y = tab.page.evaluate(
        """() => { const gd = document.querySelector('[data-testid=head-heatmap]');
                   const xa = gd.plotAxes.xaxis, ya = gd.plotAxes.yaxis, box = gd.getBoundingClientRect();
                   const T = gd.data[0].z.length;
                   return [box.left + xa.offset + xa.d2p(T - 1), box.top + ya.offset + ya.d2p(1)]; }"""
    )
    tab.page.mouse.click(x, y)
    assert "position 1" in tab.page.locator("#predictions-title").inner_text()


def test_the_row_sum_column_names_its_row(tab):
    tab.open("/#view=pipeline&text=" + quote(SENTENCE))
    sums = tab.figure("mask-steps")["data"][4]
    assert sums["hovertemplate"].startswith("row %{customdata[0]}")
    assert sums["customdata"][3] == [["3 ␣on"]]  # the row's label, not a letter of it
    assert tab.unexpected_console_errors() == []


def test_the_head_heatmap_downloads_as_svg_and_png(tab):
    """The heatmap's own buttons (shown on hover): an SVG whose labels are text and whose cells are an image of
    the canvas, and a PNG at twice the plot's size."""
    tab.open("/#text=" + quote(SENTENCE))
    heatmap = tab.page.get_by_test_id("head-heatmap")
    heatmap.hover()
    with tab.page.expect_download() as info:
        heatmap.get_by_role("button", name="Download as SVG").click()
    svg = Path(info.value.path()).read_text()
    assert info.value.suggested_filename.endswith(".svg")
    assert svg.lstrip().startswith("<svg") and "<image" in svg and "data:image/png;base64," in svg
    ElementTree.fromstring(svg)  # a well-formed document, which an image viewer opens
    for token in tab.tokens()[:3]:
        assert f">{token}</text>" in svg  # the tick labels, as text
    with tab.page.expect_download() as info:
        heatmap.get_by_role("button", name="Download as PNG").click()
    png = Path(info.value.path()).read_bytes()
    assert info.value.suggested_filename.endswith(".png") and png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    box = heatmap.bounding_box()
    assert abs(width - 2 * box["width"]) <= 2 and abs(height - 2 * box["height"]) <= 2
    assert tab.unexpected_console_errors() == []


def _float32s(spec: dict) -> list[float]:
    """A b64 matrix of the answer ({dtype: f4, bdata, shape}) as a flat list of its float32 values."""
    import base64
    import struct

    data = base64.b64decode(spec["bdata"])
    return list(struct.unpack(f"<{len(data) // 4}f", data))


@pytest.mark.parametrize("width", [1280, 390])
def test_the_csv_holds_the_servers_float32_weights_whatever_the_page_fetched(tab, width):
    """Issue 32, item 7: at 390 px this text's heatmap is max-pooled, at 1280 px it is not; the CSV
    of the same head is the same either way: every weight the server's float32 (not rounded to 5 decimals),
    at the precision its file name states. Issue 42, item 23: the file is plain CSV, as Python's csv
    module (and a spreadsheet) reads it: the first row the header, every data row's numbers numbers."""
    page = tab.page
    page.set_viewport_size({"width": width, "height": 900})
    text = text_of_tokens(tab.base_url, 230)
    tab.open("/#layer=1&head=2&text=" + quote(text))
    body = {"text": text, "layers": [1], "heads": [2], "include": ["pattern"], "encoding": "b64", "precision": "f4"}
    served = _float32s(
        post_json(tab.base_url + "/api/attention", {**body, "top_k": 0})["layers"][0]["heads"][0]["pattern"]
    )
    with page.expect_download() as info:
        page.locator("#download-csv").click()
    assert info.value.suggested_filename == "attnscope-L1H2-float32.csv"
    with open(info.value.path(), newline="") as f:
        header, *rows = csv.reader(f)
    assert header[:8] == ["layer", "head", "query_index", "query_token", "key_index", "key_token", "mask", "pattern"]
    numeric = [i for i, name in enumerate(header) if not name.endswith("_token")]
    assert all(len(row) == len(header) for row in rows)
    assert all(math.isfinite(float(row[i])) for row in rows for i in numeric if row[i] != "")
    assert all(row[header.index("pattern")] != "" for row in rows)
    weights = [float(row[header.index("pattern")]) for row in rows]
    assert len(weights) == len(served) == 230 * 230
    assert [np_float32(w) for w in weights] == served  # each written weight reads back as the server's float32
    assert any(w != round(w, 5) for w in served)  # weights that 5 decimals would change


def np_float32(x: float) -> float:
    """``x`` rounded to float32, as a Python float."""
    import struct

    return struct.unpack("<f", struct.pack("<f", x))[0]


@pytest.mark.parametrize("width", [1280, 390])
def test_the_statistics_table_never_breaks_a_number(tab, width):
    """Issue 32, item 6: at 390 px the table wrapped "32.00" as "32." over "00"; every number
    stands on one line and the table stays inside its card."""
    page = tab.page
    page.set_viewport_size({"width": width, "height": 900})
    tab.open("/#view=scaling&text=" + quote("The doctor said she was right."))
    page.wait_for_selector("[data-testid=stats-table] tbody td.num")
    cells = page.evaluate(
        """() => [...document.querySelectorAll('[data-testid=stats-table] .num')].map((td) => {
            const range = document.createRange();
            range.selectNodeContents(td);
            return [td.textContent, range.getClientRects().length];
        })"""
    )
    numbers = [(text, lines) for text, lines in cells if any(c.isdigit() for c in text)]
    assert numbers and all(lines == 1 for _, lines in numbers), numbers
    table = page.get_by_test_id("stats-table").bounding_box()
    card = page.locator("[data-testid=stats-table]").locator("xpath=..").bounding_box()
    assert table["x"] + table["width"] <= card["x"] + card["width"] + 0.5 and table["x"] + table["width"] <= width
