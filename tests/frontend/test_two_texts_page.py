"""The "Two texts" view: the chosen head on two texts and their difference, the server's numbers
(POST /api/compare-texts), the second text in the link; texts of different lengths say why no
difference is drawn; at 390 px the three plots stand one under another."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import post_json, strongest_head

pytestmark = pytest.mark.browser

A, B = "The doctor said she", "The doctor said he"


def open_two_texts(tab, width: int) -> tuple[int, int]:
    """Two texts at ``width`` px, the model's strongest induction head on A and B, once their difference is
    drawn; returns its (layer, head)."""
    layer, head = strongest_head(tab.base_url, "induction")
    tab.open_at(
        width, f"/#view=twotexts&layer={layer}&head={head}&text=" + quote(A) + "&textb=" + quote(B), height=1000
    )
    tab.drawn("twotexts-diff")
    return layer, head


@pytest.mark.parametrize("width", [1280, 390])
def test_two_texts_and_their_difference_are_the_servers(tab, width):
    page = tab.page
    layer, head = open_two_texts(tab, width)
    served = post_json(tab.base_url + "/api/compare-texts", {"text": A, "text_b": B, "layer": layer, "head": head})
    for testid, text in (("twotexts-a", served["texts"][0]), ("twotexts-b", served["texts"][1])):
        drawn = tab.figure(testid)["data"][0]["z"]
        assert [c or 0 for row in drawn for c in row] == pytest.approx(
            [c for row in text["pattern"] for c in row], abs=1e-9
        )
    diff = tab.figure("twotexts-diff")
    drawn = [c or 0 for row in diff["data"][0]["z"] for c in row]
    assert drawn == pytest.approx([c for row in served["difference"] for c in row], abs=1e-9)
    assert diff["data"][0]["zmax"] == pytest.approx(served["max_abs_difference"]) and diff["data"][0]["zmid"] == 0
    assert "the second's weights minus the first's" in page.get_by_test_id("twotexts-caption").inner_text()
    boxes = [page.get_by_test_id(t).bounding_box() for t in ("twotexts-a", "twotexts-b", "twotexts-diff")]
    assert all(b["x"] >= 0 and b["x"] + b["width"] <= width for b in boxes)
    if width == 390:  # stacked
        assert boxes[0]["y"] < boxes[1]["y"] < boxes[2]["y"]
    # a longer second text: both heads drawn, the difference left out and why
    page.get_by_test_id("text-b").fill(B + " was right")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=twotexts-caption]').innerText.includes('No difference')"
    )
    assert page.get_by_test_id("twotexts-diff").is_hidden()
    assert "textb=" in page.evaluate("() => window.location.hash")
    # a second text over the context: said, naming it, and no empty frames
    page.get_by_test_id("text-b").fill(B + " again" * 300)
    page.wait_for_function(
        "() => document.querySelector('[data-testid=twotexts-caption]').innerText.includes('Could not compare')"
    )
    assert "text_b is" in page.get_by_test_id("twotexts-caption").inner_text()
    assert page.get_by_test_id("twotexts-plots").is_hidden()
    assert not tab.unexpected_console_errors(allowed=("422",))  # the refused text_b, said on the page


@pytest.mark.parametrize("width", [1280, 390])
def test_the_titles_stand_clear_of_the_axis_and_its_labels(tab, width):
    """Issue 32, item 6: at 390 px "first text" overlapped "key (attended to)" and the token labels."""
    page = tab.page
    open_two_texts(tab, width)
    for testid in ("twotexts-a", "twotexts-b"):
        boxes = page.evaluate(
            """(id) => {
                const gd = document.querySelector(`[data-testid=${id}]`);
                const box = (el) => {
                    const r = el.getBoundingClientRect();
                    return [r.left, r.top, r.right, r.bottom];
                };
                return {title: box(gd.querySelector('.gtitle')), axis: box(gd.querySelector('.xtitle')),
                        ticks: [...gd.querySelectorAll('.xtick text')].map(box)};
            }""",
            testid,
        )

        def overlap(a, b):
            return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

        assert not overlap(boxes["title"], boxes["axis"]), boxes
        assert boxes["ticks"] and not any(
            overlap(boxes["title"], t) or overlap(boxes["axis"], t) for t in boxes["ticks"]
        )
