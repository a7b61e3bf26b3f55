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
    # the three tables hold the same numbers
    tables = tab.page.locator("#bow-matrices table")
    assert tables.count() == 3
    texts = tables.all_inner_texts()
    assert texts[0] == texts[1] == texts[2]
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
        "() => document.querySelectorAll('#bow-matrices .matrix-box:first-child tr').length === 12"
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
