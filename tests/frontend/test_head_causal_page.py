"""The head view's causal tools (issue 34): knock cells of the chosen head's heatmap out and see the
prediction change (POST /api/knockout), or click a cell and see which earlier components write its
query and its key (POST /api/qk-attribution); every number the server's, the cells marked on the
map and kept in the link, refusals said in one line, the what-ifs named; at 1280 and 390 px.

The shipped model's strongest induction head (by GET /api/heads: L3H2) on the repeated phrase (docs/API.md's
worked example), and a random DiffLlama (tests/kit/family.py), whose pairs of softmaxes neither route splits.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.kit.live import post_json, strongest_head

pytestmark = pytest.mark.browser

FAMILY = "diffllama"  # served by conftest's family_server, for the refusals
TEXT = "Open the red door, then close the blue window. Open the red door, then close the blue"
WIDTHS = [1280, 390]


def open_head(tab, width: int, extra: str = "") -> tuple[int, int]:
    """The induction head's view of TEXT at ``width`` px; returns its (layer, head)."""
    layer, head = strongest_head(tab.base_url, "induction")
    tab.open_at(width, f"/#layer={layer}&head={head}{extra}&text=" + quote(TEXT))
    return layer, head


def click_cell(tab, query: int, key: int, shift: bool = False) -> None:
    """A real mouse click on cell (query, key) of the head heatmap, found through the heatmap's axes."""
    page = tab.page
    page.locator("#head-heatmap").scroll_into_view_if_needed()
    x, y = page.evaluate(
        """([q, k]) => {
            const gd = document.getElementById("head-heatmap");
            const xa = gd.plotAxes.xaxis, ya = gd.plotAxes.yaxis, r = gd.getBoundingClientRect();
            return [r.left + xa.offset + xa.d2p(k), r.top + ya.offset + ya.d2p(q)];
        }""",
        [query, key],
    )
    if shift:
        page.keyboard.down("Shift")
    page.mouse.click(x, y)
    if shift:
        page.keyboard.up("Shift")


def rects(tab) -> list[tuple[float, float, float, float]]:
    """The filled rectangles on the head heatmap: the knocked-out cells, as (x0, x1, y0, y1)."""
    shapes = tab.figure("head-heatmap")["layout"].get("shapes", [])
    return [(s["x0"], s["x1"], s["y0"], s["y1"]) for s in shapes if s["type"] == "rect" and s.get("fillcolor")]


def wait_answer(tab, slot: str) -> dict:
    tab.page.wait_for_function(
        f"() => {{ const a = window.attnscope.state.{slot}; return a && (a.response || a.error); }}"
    )
    return tab.page.evaluate(f"() => window.attnscope.state.{slot}")


def click_in_mode(tab, width: int, mode: str, slot: str) -> tuple[dict, int, int]:
    """The induction head at ``width`` px, a click on cell (21, 10) (the last " blue" to the first " window")
    in this cell mode: the answer it gets, the layer and the head."""
    layer, head = open_head(tab, width)
    tab.page.get_by_test_id(f"mode-{mode}").check()
    click_cell(tab, 21, 10)
    return wait_answer(tab, slot)["response"], layer, head


@pytest.mark.parametrize("width", WIDTHS)
def test_a_knocked_out_cell_changes_the_prediction_as_the_server_says(tab, width):
    got, layer, head = click_in_mode(tab, width, "knockout", "knockoutAnswer")
    page = tab.page
    served = post_json(
        tab.base_url + "/api/knockout",
        {"text": TEXT, "edges": [{"layer": layer, "head": head, "query": 21, "key": 10}]},
    )
    assert got["logprob_after"] == served["logprob_after"] < served["logprob_before"] == got["logprob_before"]
    caption = page.get_by_test_id("knockout-caption").inner_text()
    before, after = f"{served['logprob_before']:.3f}", f"{served['logprob_after']:.3f}"
    assert f"log p(“{served['token']}”)" in caption and f"{before} → {after}" in caption
    assert f"L{layer}H{head}" in caption and "model as trained" not in caption
    top = page.get_by_test_id("knockout-top").locator("li").all_inner_texts()
    assert top == [f"“{p['token']}” {p['prob']:.3f}" for p in served["predictions"][21]]
    assert rects(tab) == [(9.5, 10.5, 20.5, 21.5)]
    page.wait_for_function("() => window.location.hash.includes('ko=21.10')")
    box = page.get_by_test_id("knockout").bounding_box()
    assert box["width"] <= width
    page.screenshot(path=f"/tmp/head_knockout_{width}.png", full_page=True)
    # in every head of the layer: the answer without a head
    page.get_by_test_id("knockout-all").check(force=True)
    page.wait_for_function(
        "() => window.attnscope.state.knockoutAnswer?.response && window.location.hash.includes('koall=1')"
    )
    every = post_json(
        tab.base_url + "/api/knockout", {"text": TEXT, "edges": [{"layer": layer, "query": 21, "key": 10}]}
    )
    page.wait_for_function(
        "(v) => document.querySelector('[data-testid=knockout-caption]').innerText.includes(v)",
        arg=f"{every['logprob_after']:.3f}",
    )
    assert f"every head of layer {layer}" in page.get_by_test_id("knockout-caption").inner_text()
    # one click clears them: no marks, nothing in the link
    page.get_by_test_id("knockout-clear").click()
    page.wait_for_function("() => !window.location.hash.includes('ko=')")
    assert rects(tab) == []
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_row_left_without_keys_is_said_in_one_line(tab, width):
    open_head(tab, width, "&click=knockout")
    page = tab.page
    click_cell(tab, 3, 0)
    click_cell(tab, 3, 3, shift=True)  # the box 3 × 0..3: every key of query 3
    assert rects(tab) == [(-0.5, 3.5, 2.5, 3.5)]
    error = wait_answer(tab, "knockoutAnswer")["error"]
    caption = page.get_by_test_id("knockout-caption").inner_text()
    assert caption.startswith("Not knocked out: edges") and "without any key" in caption and error in caption
    assert "\n" not in caption and page.get_by_test_id("knockout-top").locator("li").count() == 0
    assert not tab.unexpected_console_errors(allowed=("422",))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_knockout_follows_the_link_the_head_and_the_token_and_names_the_what_ifs(tab, width):
    layer, head = open_head(tab, width, "&ko=21.10&causal=0&pos=20")
    page = tab.page
    got = wait_answer(tab, "knockoutAnswer")["response"]
    edge = {"layer": layer, "head": head, "query": 21, "key": 10}
    served = post_json(tab.base_url + "/api/knockout", {"text": TEXT, "edges": [edge], "position": 20})
    assert got["position"] == 20 and got["logprob_after"] == served["logprob_after"]
    assert rects(tab) == [(9.5, 10.5, 20.5, 21.5)]
    caption = page.get_by_test_id("knockout-caption").inner_text()
    assert "model as trained" in caption and "the mask removed" in caption
    # another head: asked again for it
    other = 0 if head else 1
    page.select_option("#head-select", str(other))
    page.wait_for_function(
        "(h) => window.attnscope.state.knockoutAnswer?.response && window.attnscope.state.head === h", arg=other
    )
    tab.settle()
    again = post_json(
        tab.base_url + "/api/knockout", {"text": TEXT, "edges": [{**edge, "head": other}], "position": 20}
    )
    assert wait_answer(tab, "knockoutAnswer")["response"]["logprob_after"] == again["logprob_after"]
    assert f"L{layer}H{other}" in page.get_by_test_id("knockout-caption").inner_text()
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", WIDTHS)
def test_why_the_induction_head_attends_is_the_servers_split(tab, width):
    got, layer, head = click_in_mode(tab, width, "why", "qk")
    page = tab.page
    served = post_json(
        tab.base_url + "/api/qk-attribution", {"text": TEXT, "layer": layer, "head": head, "query": 21, "key": 10}
    )
    assert got["matrix"] == served["matrix"]
    page.wait_for_function("() => document.querySelector('[data-testid=why-sums]')?.data")
    terms = tab.figure("why-plot")["data"][0]
    assert terms["z"] == served["matrix"] and terms["x"] == terms["y"] == served["components"]
    assert terms["zmin"] == -terms["zmax"]
    rows, cols = tab.figure("why-sums")["data"]
    # the sums of the shown terms: each adds up to the server's raw score, as the matrix does
    assert sum(rows["y"]) == pytest.approx(served["score"], rel=1e-4)
    assert sum(cols["y"]) == pytest.approx(served["score"], rel=1e-4)
    assert rows["x"] == cols["x"] == served["components"]
    caption = page.get_by_test_id("why-caption").inner_text()
    assert f"raw score {served['score']}" in caption and served["frozen"] in caption and "add up" in caption
    assert "sums of the shown terms" in caption and "model as trained" not in caption
    page.wait_for_function("() => window.location.hash.includes('why=21.10')")
    assert page.get_by_test_id("why-plot").bounding_box()["width"] <= width
    page.screenshot(path=f"/tmp/head_why_{width}.png", full_page=True)
    # a switched-off head: the heatmap is the what-if, the split the model as trained, said
    tab.open(f"/#layer={layer}&head={head}&why=21.10&off=0.2&text=" + quote(TEXT))
    wait_answer(tab, "qk")
    page.wait_for_function("() => document.querySelector('[data-testid=why-caption]').innerText.includes('trained')")
    assert "1 head switched off" in page.get_by_test_id("why-caption").inner_text()
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_family_neither_route_splits_is_said_in_one_line(family_tab, width):
    tab = family_tab
    tab.page.set_viewport_size({"width": width, "height": 900})
    tab.open("/#layer=1&head=0&why=5.2&ko=5.2&text=" + quote(TEXT))
    page = tab.page
    wait_answer(tab, "qk")
    wait_answer(tab, "knockoutAnswer")
    why = page.get_by_test_id("why-caption").inner_text()
    ko = page.get_by_test_id("knockout-caption").inner_text()
    assert why.startswith("Not split: ") and "\n" not in why
    assert ko.startswith("Not knocked out: edges") and "\n" not in ko
    assert not page.get_by_test_id("why-plot").is_visible() and not page.get_by_test_id("why-sums").is_visible()
    assert not tab.unexpected_console_errors(allowed=("422",))


def test_tabs_switched_after_the_text_changed_under_an_open_why_box_raise_nothing(tab):
    """Issue 42, item 9: the why box's plots drawn, then hidden by a new text (its cell beyond the new
    tokens); switching away and back to the head view resizes only the plots on show, so no
    "Resize must be passed a displayed plot div element" escapes to the page."""
    open_head(tab, 1280, "&why=21.10")
    page = tab.page
    wait_answer(tab, "qk")
    page.wait_for_function("() => document.querySelector('[data-testid=why-plot]')?.data")
    page.get_by_test_id("text-input").fill("A different text")
    page.wait_for_function("() => document.querySelector('[data-testid=why-plot]').hidden")
    tab.settle()
    for view in ("lines", "head", "rollout", "head"):
        page.locator(f"#tab-{view}").click()
        page.wait_for_function("(v) => !document.getElementById(`view-${v}`).hidden", arg=view)
    page.wait_for_timeout(500)  # Plotly's resize rejects a promise: the page error lands after the click
    assert page.get_by_test_id("why-plot").is_hidden()
    assert not tab.unexpected_console_errors()


def covered(tab) -> set[tuple[int, int]]:
    """The (query, key) cells the marks on the heatmap cover."""
    return {
        (q, k)
        for x0, x1, y0, y1 in rects(tab)
        for q in range(round(y0 + 0.5), round(y1 + 0.5))
        for k in range(round(x0 + 0.5), round(x1 + 0.5))
    }


def test_a_click_inside_a_knocked_out_box_takes_back_that_one_cell(tab):
    """Issue 42, item 17 (docs/VIEWS.md: a click on a marked cell takes back that one): a shift-click box
    of 3 × 3 cells, then a click on its middle cell leaves the other 8 knocked out, on the map, in the
    link and in the request."""
    open_head(tab, 1280, "&click=knockout")
    page = tab.page
    click_cell(tab, 19, 8)
    click_cell(tab, 21, 10, shift=True)
    box = {(q, k) for q in range(19, 22) for k in range(8, 11)}
    assert covered(tab) == box
    wait_answer(tab, "knockoutAnswer")
    with page.expect_request(lambda r: r.url.endswith("/api/knockout")) as asked:
        click_cell(tab, 20, 9)
    assert covered(tab) == box - {(20, 9)}
    assert sum((x1 - x0) * (y1 - y0) for x0, x1, y0, y1 in rects(tab)) == len(box) - 1  # no cell marked twice
    page.wait_for_function("() => window.location.hash.includes('ko=') && !window.location.hash.includes('ko=19-21')")
    edges = json.loads(asked.value.post_data)["edges"]
    span = lambda v: range(v[0], v[1]) if isinstance(v, list) else [v]  # noqa: E731  a position or [a, b)
    assert {(q, k) for e in edges for q in span(e["query"]) for k in span(e["key"])} == box - {(20, 9)}
    assert not tab.unexpected_console_errors()
