"""The lessons page in a real browser against the real server's lesson endpoints."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.browser


def numbers_of(tab, selector: str) -> dict[str, str]:
    boxes = tab.page.locator(f"{selector} .number")
    return {
        boxes.nth(i).locator(".label").inner_text(): boxes.nth(i).locator(".value").inner_text()
        for i in range(boxes.count())
    }


def test_the_three_averages_agree(tab):
    tab.open("/lessons.html")
    verdict = tab.page.get_by_test_id("bow-agree")
    tab.page.wait_for_selector("[data-testid=bow-agree][data-agree]")
    assert verdict.get_attribute("data-agree") == "true"
    assert "All three averages agree" in verdict.inner_text()
    # x[0], then the three averages: those three tables hold the same numbers
    tables = tab.page.locator("#bow-matrices table")
    assert tables.count() == 4
    texts = tables.all_inner_texts()
    assert texts[1] == texts[2] == texts[3] != texts[0]
    # the weights are the running-mean matrix: 1/(t+1) on and below the diagonal
    z = tab.figure("bow-weights")["data"][0]["z"]
    T = len(z)
    assert T == 8
    for t, row in enumerate(z):
        assert all(math.isclose(v, 1 / (t + 1), abs_tol=1e-5) for v in row[: t + 1])
        assert all(v is None for v in row[t + 1 :])
    # a new T is recomputed by the server and still agrees
    slider = tab.page.locator("#bow-T")
    slider.fill("12")
    tab.page.wait_for_function(
        "() => document.querySelectorAll('#bow-matrices .matrix-box:nth-child(2) tr').length === 12"
    )
    assert len(tab.figure("bow-weights")["data"][0]["z"]) == 12
    assert verdict.get_attribute("data-agree") == "true"


def test_softmax_of_the_row_times_eight_is_peaky(tab):
    tab.open("/lessons.html")
    tab.page.wait_for_selector("#softmax-bars.drawn")
    bars = tab.figure("softmax-bars")["data"]
    plain, sharp = bars[0]["y"], bars[1]["y"]
    assert math.isclose(sum(plain), 1, abs_tol=1e-6) and math.isclose(sum(sharp), 1, abs_tol=1e-6)
    assert max(sharp) > 0.75 > max(plain)
    # factor 1: both rows are the same
    tab.page.locator("#softmax-factor").fill("1")
    tab.page.wait_for_function(
        "() => document.querySelector('[data-testid=softmax-bars]').data[1].name.includes('× 1)')"
    )
    bars = tab.figure("softmax-bars")["data"]
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(bars[0]["y"], bars[1]["y"]))


def test_score_variance_grows_with_head_size_until_scaled(tab):
    tab.open("/lessons.html")
    tab.page.wait_for_selector("#variance-sweep.drawn")
    sweep = tab.figure("variance-sweep")["data"]
    sizes = sweep[0]["x"]
    raw = sweep[2]["y"]
    scaled = sweep[3]["y"]
    for hs, r, s in zip(sizes, raw, scaled):
        assert 0.5 * hs < r < 2 * hs  # var(q·kᵀ) ≈ head size
        assert 0.5 < s < 2  # ≈ 1 once divided by √head size
    tab.page.locator("#variance-size").fill("6")  # 64
    tab.page.wait_for_function("() => document.querySelector('#variance-size-value').textContent === '64'")
    tab.page.wait_for_function(
        "() => [...document.querySelectorAll('#variance-numbers .label')].some(l => l.textContent.includes('√64'))"
    )
    numbers = numbers_of(tab, "#variance-numbers")
    assert math.isclose(float(numbers["ratio"]), 64, rel_tol=1e-3)


# ------------------------------------------------------------------ lesson 1: the notebooks' x


def x_table(tab) -> list[list[float]]:
    """The first table under the averaging weights: x[0] as the page prints it."""
    rows = tab.page.locator("#bow-matrices .matrix-box:first-child tr")
    return [[float(v) for v in rows.nth(i).locator("td").all_inner_texts()] for i in range(rows.count())]


@pytest.mark.parametrize(
    ("preset", "draw", "seed"),
    [("notebook-000", "rand", 42), ("notebook-001-003", "randn", 42), ("lecture", "randn", 1337)],
)
def test_each_preset_shows_the_x_torch_draws_in_that_notebook(tab, preset, draw, seed):
    import torch

    tab.open("/lessons.html")
    tab.page.wait_for_selector("#bow-matrices table")
    tab.page.select_option("#bow-preset", preset)
    tab.page.wait_for_function(
        "(d) => document.querySelector('#bow-matrices h3').textContent === `x[0] (torch.${d})`", arg=draw
    )
    tab.page.wait_for_function(
        "(s) => document.querySelector('#bow-code').textContent.includes(`(${s})`)", arg=str(seed)
    )
    torch.manual_seed(seed)  # the notebook's cell, torch as the oracle
    x = (torch.rand if draw == "rand" else torch.randn)(4, 8, 2)
    shown = x_table(tab)
    assert len(shown) == 8 and all(len(row) == 2 for row in shown)
    for got_row, want_row in zip(shown, x[0].tolist()):
        for got, want in zip(got_row, want_row):
            assert abs(got - want) <= 5e-5 + 1e-7  # printed to 4 decimals, as torch prints it
    code = tab.page.locator("#bow-code").inner_text()
    assert f"torch.{draw}(4, 8, 2)" in code and str(seed) in code
    assert tab.page.locator("#bow-draw").input_value() == draw
    assert tab.page.locator("#bow-seed").input_value() == str(seed)


def test_changing_the_draw_leaves_the_preset_and_a_bad_seed_is_named(tab):
    tab.open("/lessons.html")
    tab.page.wait_for_selector("#bow-matrices table")
    assert tab.page.locator("#bow-preset").input_value() == "notebook-000"
    before = x_table(tab)
    tab.page.select_option("#bow-draw", "randn")
    tab.page.wait_for_function("() => document.querySelector('#bow-matrices h3').textContent.includes('randn')")
    assert tab.page.locator("#bow-preset").input_value() == "notebook-001-003"  # randn, seed 42 is theirs
    assert x_table(tab) != before
    tab.page.locator("#bow-seed").fill("7")
    tab.page.wait_for_function("() => document.querySelector('#bow-code').textContent.includes('manual_seed(7)')")
    assert tab.page.locator("#bow-preset").input_value() == "custom"
    tab.page.locator("#bow-seed").fill("-3")
    error = tab.page.get_by_test_id("bow-seed-error")
    error.wait_for(state="visible")
    assert "-3" in error.inner_text() and "whole number" in error.inner_text()
    assert tab.page.locator("#bow-seed").get_attribute("aria-invalid") == "true"
    assert "manual_seed(7)" in tab.page.locator("#bow-code").inner_text()  # the shown draw is still seed 7


# ------------------------------------------------------------------ lesson 2: the scores box


def test_bad_scores_are_named_and_the_old_row_is_marked_stale(tab):
    tab.open("/lessons.html")
    tab.page.wait_for_selector("#softmax-bars.drawn")
    box = tab.page.locator("#softmax-logits")
    section = tab.page.locator("#lesson-softmax")
    error = tab.page.get_by_test_id("softmax-error")
    assert error.is_hidden() and section.get_attribute("data-stale") is None

    box.fill("1, abc")
    error.wait_for(state="visible")
    assert '"abc"' in error.inner_text() and "not a number" in error.inner_text()
    assert box.get_attribute("aria-invalid") == "true"
    assert section.get_attribute("data-stale") == "true"
    note = tab.page.get_by_test_id("softmax-stale")
    assert note.is_visible() and "0.1, -0.2, 0.3, -0.2, 0.5" in note.inner_text()
    faded = tab.page.evaluate("() => getComputedStyle(document.querySelector('#softmax-bars')).opacity")
    assert float(faded) < 0.5

    box.fill(", ".join(["1"] * 65))
    tab.page.wait_for_function("() => document.querySelector('#softmax-logits-error').textContent.includes('64')")

    box.fill("1, 2")  # valid again: recomputed, the marks go
    tab.page.wait_for_function("() => !document.querySelector('#lesson-softmax').dataset.stale")
    assert error.is_hidden() and note.is_hidden()
    assert box.get_attribute("aria-invalid") == "false"
    plain = tab.figure("softmax-bars")["data"][0]["y"]
    assert len(plain) == 2 and math.isclose(plain[1] / plain[0], math.e, rel_tol=1e-4)


def test_the_scores_box_fits_a_typical_row(tab):
    tab.open("/lessons.html")
    box = tab.page.locator("#softmax-logits")
    box.fill("0.1, -0.2, 0.3, -0.2, 0.5, 1.2, -0.7, 0.9, 0.25, -1.5")
    overflow = tab.page.evaluate(
        "() => { const e = document.querySelector('#softmax-logits'); return e.scrollWidth - e.clientWidth; }"
    )
    assert overflow <= 0, f"the text overflows the box by {overflow}px"


def test_the_scores_limits_are_the_servers_own(tab):
    """The page reads the row's limits from /openapi.json: a document saying 3 and 10 is obeyed."""

    def small_limits(route):
        spec = route.fetch().json()
        logits = spec["components"]["schemas"]["SoftmaxScalingRequest"]["properties"]["logits"]
        assert logits["maxItems"] == 64 and logits["items"]["maximum"] == 1e6  # what the server sends
        logits["maxItems"] = 3
        logits["items"]["maximum"] = 10
        route.fulfill(json=spec)

    tab.page.route("**/openapi.json", small_limits)
    with tab.page.expect_response("**/openapi.json"):
        tab.open("/lessons.html")
    tab.page.wait_for_selector("#softmax-bars.drawn")
    box = tab.page.locator("#softmax-logits")
    error = tab.page.get_by_test_id("softmax-error")
    box.fill("1, 2, 3, 4")
    error.wait_for(state="visible")
    assert error.inner_text() == "scores: at most 3 scores, got 4"
    box.fill("1, 20")
    tab.page.wait_for_function("() => document.querySelector('#softmax-logits-error').textContent.includes('20')")
    assert error.inner_text() == "scores: score 2 is 20; scores must be from -10 to 10"


def test_without_the_openapi_document_the_server_names_the_limit(tab):
    tab.page.route("**/openapi.json", lambda route: route.abort())
    tab.open("/lessons.html")
    tab.page.wait_for_selector("#softmax-bars.drawn")
    tab.page.locator("#softmax-logits").fill(", ".join(["1"] * 65))
    error = tab.page.get_by_test_id("softmax-error")
    error.wait_for(state="visible")
    assert "64" in error.inner_text() and error.inner_text().startswith("scores: ")  # the server's 422, named
    assert tab.page.locator("#lesson-softmax").get_attribute("data-stale") == "true"


def test_four_channel_tables_neither_overlap_nor_widen_a_phone_page(tab):
    """At 390 px with C = 4 each table is wider than half the column: they stack, and a table wider than
    the window would scroll inside its own box, never the page (issue 42, item 7)."""
    tab.open_at(390, "/lessons.html")
    tab.page.wait_for_selector("#bow-matrices table")
    tab.page.locator("#bow-C").fill("4")
    tab.page.wait_for_function(
        "() => [...document.querySelectorAll('#bow-matrices tr')].every(tr => tr.children.length === 4)"
    )
    boxes = [t.bounding_box() for t in tab.page.locator("#bow-matrices table").all()]
    assert len(boxes) == 4
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart_x = a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
            apart_y = a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"]
            assert apart_x or apart_y, (a, b)
    assert tab.page.evaluate("document.documentElement.scrollWidth") <= 390
