"""The "Lines" view (BertViz's head view): one layer's attention as lines from query tokens to key
tokens, a colour per head, each line as opaque as the server's weight; hovering a token keeps
its lines; a head's swatch hides its lines; a long text keeps each query's heaviest keys."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import FILLER, post_json

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat. The cat"


def lines(page) -> list[dict]:
    return page.evaluate(
        """() => [...document.querySelectorAll('[data-testid=lines-svg] line')].map((l) => ({
            head: +l.dataset.head, query: +l.dataset.query, key: +l.dataset.key,
            opacity: +l.getAttribute('stroke-opacity'), shown: l.style.display !== 'none'}))"""
    )


@pytest.mark.parametrize("width", [1280, 390])
def test_every_weight_is_a_line_as_opaque_as_it(tab, width):
    page = tab.page
    tab.open_at(width, "/#view=lines&layer=1&text=" + quote(TEXT))
    page.wait_for_function("() => document.querySelectorAll('[data-testid=lines-svg] line').length > 0")
    served = post_json(
        tab.base_url + "/api/attention", {"text": TEXT, "layers": [1], "include": ["pattern"], "top_k": 0}
    )
    expected = {
        (h["head"], i, j): w
        for h in served["layers"][0]["heads"]
        for i, row in enumerate(h["pattern"])
        for j, w in enumerate(row)
        if w >= 0.01
    }
    drawn = {(line["head"], line["query"], line["key"]): line["opacity"] for line in lines(page)}
    assert drawn.keys() == expected.keys()
    assert list(drawn.values()) == pytest.approx([expected[k] for k in drawn], abs=1e-5)  # float32 against 5 decimals
    assert all(j <= i for (_, i, j) in drawn)  # causal: no line to a later key
    # hover the query "sat" (token 2): only its lines stay
    page.locator("[data-testid=lines-svg] text[data-side=query][data-index='2']").hover()
    shown = [line for line in lines(page) if line["shown"]]
    assert shown and all(line["query"] == 2 for line in shown)
    page.mouse.move(0, 0)
    # a head's swatch hides its lines
    page.locator("[data-testid=lines-heads] [data-head='0']").click()
    page.wait_for_function(
        "() => ![...document.querySelectorAll('[data-testid=lines-svg] line')].some((l) => l.dataset.head === '0')"
    )
    assert page.locator("[data-testid=lines-heads] [data-head='0']").get_attribute("aria-pressed") == "false"
    svg = page.get_by_test_id("lines-svg").bounding_box()
    assert svg["x"] >= 0 and svg["x"] + svg["width"] <= width
    assert not tab.unexpected_console_errors()


def test_a_long_text_keeps_each_querys_heaviest_keys(tab):
    text = FILLER[:400]
    tab.open("/#view=lines&layer=0&text=" + quote(text))
    page = tab.page
    page.wait_for_function("() => document.querySelectorAll('[data-testid=lines-svg] line').length > 0")
    per_query = {}
    for line in lines(page):
        per_query.setdefault((line["head"], line["query"]), []).append(line)
    assert max(len(v) for v in per_query.values()) <= 3
    assert "heaviest keys" in page.get_by_test_id("lines-caption").inner_text()


def test_selected_tokens_are_combined_by_the_server(tab):
    tab.open("/#view=lines&layer=1&head=2&text=" + quote(TEXT))
    page = tab.page
    page.wait_for_function("() => document.querySelectorAll('[data-testid=lines-svg] line').length > 0")
    for side, index in (("query", 6), ("query", 8), ("key", 1)):
        page.locator(f"[data-testid=lines-svg] text[data-side={side}][data-index='{index}']").click()
    page.wait_for_function("() => document.querySelector('[data-testid=lines-selection-plot]')?.data?.length === 2")
    served = post_json(
        tab.base_url + "/api/selection", {"text": TEXT, "layer": 1, "head": 2, "queries": [6, 8], "keys": [1]}
    )
    fig = tab.figure("lines-selection-plot")
    assert [t["y"] for t in fig["data"]] == [served["from_queries"], served["to_keys"]]
    assert "2 queries (6, 8) and 1 key (1) selected" in page.get_by_test_id("lines-selection-caption").inner_text()
    page.get_by_test_id("lines-reduce").select_option("sum")
    page.wait_for_function("() => window.attnscope.state.linesSelected?.response?.reduce === 'sum'")
    summed = post_json(
        tab.base_url + "/api/selection",
        {"text": TEXT, "layer": 1, "head": 2, "queries": [6, 8], "keys": [1], "reduce": "sum"},
    )
    page.wait_for_function(
        "() => document.querySelector('[data-testid=lines-selection-plot]').data[0].name.includes('sum')"
    )
    assert tab.figure("lines-selection-plot")["data"][0]["y"] == summed["from_queries"]
    assert not tab.unexpected_console_errors()
