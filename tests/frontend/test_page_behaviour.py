"""What a new user met in the explorer (issue 15, item 5): links, bars, selection, empty and long
text, a phone-sized window. Each test checks the page against the server's own answer."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest

from tests.kit.live import FILLER, post_json, wait_settled

pytestmark = pytest.mark.browser

SENTENCE = "The cat sat on the mat because the mat was warm."


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def attention_posts(tab) -> int:
    return sum(1 for u in tab.requests if u.endswith("/api/attention"))


# ------------------------------------------------------------------ a link to a head the model lacks


def test_a_link_naming_a_head_the_model_lacks_is_clamped_and_says_so(tab):
    model = get_json(tab.base_url + "/api/model")
    n_layer, n_head = model["n_layer"], model["n_head"]
    asked_layer, asked_head = n_layer + 3, n_head + 5
    tab.open(f"/#text={quote(SENTENCE)}&layer={asked_layer}&head={asked_head}")
    last_layer, last_head = n_layer - 1, n_head - 1
    page = tab.page
    assert page.get_by_test_id("layer-select").input_value() == str(last_layer)
    assert page.get_by_test_id("head-select").input_value() == str(last_head)
    # a calm notice, not the red error banner
    notice = page.get_by_test_id("link-notice")
    assert notice.is_visible()
    words = notice.inner_text()
    assert f"layer {asked_layer}, head {asked_head}" in words
    assert f"{n_layer} layers × {n_head} heads" in words
    assert f"showing layer {last_layer}, head {last_head}" in words
    assert page.get_by_test_id("error-banner").is_hidden()
    # the head views are drawn, for the head the page shows
    assert f"L{last_layer} · H{last_head}" in tab.figure("head-heatmap")["data"][0]["hovertemplate"]
    assert page.locator("#head-title").inner_text() == f"Layer {last_layer} · head {last_head}"
    # the address is rewritten to what is shown
    page.wait_for_function(
        "([l, h]) => location.hash.includes(`layer=${l}&`) && location.hash.includes(`head=${h}&`)",
        arg=[last_layer, last_head],
    )
    assert tab.unexpected_console_errors() == []
    # the notice can be dismissed
    page.get_by_role("button", name="Dismiss the note").click()
    assert notice.is_hidden()


def test_a_link_within_the_model_has_no_notice(tab):
    tab.open(f"/#text={quote(SENTENCE)}&layer=1&head=2")
    assert tab.page.get_by_test_id("layer-select").input_value() == "1"
    assert tab.page.get_by_test_id("link-notice").is_hidden()


# ------------------------------------------------------------------ next-token bars


@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_next_token_bars_are_as_long_as_their_probability(tab, temperature):
    # position 1 ("cat"): a spread-out guess, so a bar scaled to the top guess would show
    tab.open(f"/#text={quote(SENTENCE)}&temp={temperature}&pos=1")
    answer = post_json(
        tab.base_url + "/api/attention",
        {"text": SENTENCE, "layers": [], "include": [], "top_k": 10, "temperature": temperature},
    )
    expected = answer["predictions"][1]
    rows = tab.page.evaluate(
        """() => [...document.querySelectorAll('#predictions-list li')].map((li) => ({
            token: li.querySelector('.pred-token').textContent,
            track: li.querySelector('.pred-bar').getBoundingClientRect().width,
            fill: li.querySelector('.pred-bar span').getBoundingClientRect().width,
            label: li.querySelector('.pred-prob').textContent,
        }))"""
    )
    assert [r["token"] for r in rows] == [p["token"] for p in expected]
    assert expected[0]["prob"] < 0.9  # else a full top bar would be right either way
    for row, pred in zip(rows, expected, strict=True):
        # the whole track is 100 %: the fill is the probability, within a pixel
        assert abs(row["fill"] - pred["prob"] * row["track"]) <= 1.0, (row, pred)
        # the label is the same probability, in per cent
        shown = float(row["label"].rstrip("%").lstrip("<"))
        assert abs(shown - 100 * pred["prob"]) <= 0.5 or (row["label"].startswith("<") and 100 * pred["prob"] < shown)
    # widths compare as the probabilities do
    top, second = rows[0], rows[1]
    if second["fill"] > 2:
        assert abs(top["fill"] / second["fill"] - expected[0]["prob"] / expected[1]["prob"]) < 0.1


# ------------------------------------------------------------------ a clicked token and new text


def test_a_clicked_token_is_let_go_when_the_text_changes(tab):
    tab.open("/#text=" + quote(SENTENCE))
    chips = tab.page.locator("[data-testid=tokens] .chip")
    chips.nth(1).click()
    assert "position 1" in tab.page.locator("#predictions-title").inner_text()
    box = tab.page.get_by_test_id("text-input")
    box.press("End")
    box.press_sequentially(" It slept")
    tab.settle()
    T = chips.count()
    pressed = [i for i in range(T) if chips.nth(i).get_attribute("aria-pressed") == "true"]
    assert pressed == [T - 1]  # back to the last token, where the text goes on
    assert f"position {T - 1}" in tab.page.locator("#predictions-title").inner_text()
    assert "pos=" not in tab.page.evaluate("() => location.hash")


# ------------------------------------------------------------------ an empty box


def test_an_empty_box_shows_an_empty_state_and_asks_nothing(tab):
    tab.open("/#text=" + quote(SENTENCE))
    before = attention_posts(tab)
    box = tab.page.get_by_test_id("text-input")
    box.fill("")
    tab.page.wait_for_timeout(400)  # longer than the typing debounce
    tab.settle()
    empty = tab.page.get_by_test_id("empty-state")
    assert empty.is_visible() and "Type" in empty.inner_text()
    assert tab.page.get_by_test_id("error-banner").is_hidden()
    assert tab.tokens() == []
    assert attention_posts(tab) == before
    box.press("Enter")
    tab.page.wait_for_timeout(200)
    assert attention_posts(tab) == before and tab.page.get_by_test_id("error-banner").is_hidden()
    # typing again brings the picture back
    box.press_sequentially("The dog ran")
    tab.settle()
    assert empty.is_hidden() and tab.tokens()
    # spaces and line breaks only: blank to the server too (a 422), so the same empty state
    before = attention_posts(tab)
    box.fill("   \n\t  ")
    tab.page.wait_for_timeout(400)
    tab.settle()
    assert empty.is_visible() and tab.page.get_by_test_id("error-banner").is_hidden()
    assert tab.tokens() == [] and tab.page.locator("#token-count").inner_text() == "no tokens"
    assert attention_posts(tab) == before
    assert tab.refusal("   \n\t  ")[0]["type"] == "text_blank"
    assert tab.unexpected_console_errors() == []


def test_a_pasted_text_then_enter_is_asked_for_once(tab):
    tab.open("/#text=" + quote(SENTENCE))
    before = attention_posts(tab)
    box = tab.page.get_by_test_id("text-input")
    box.fill(FILLER)  # a paste: one input event, which sends the text at once
    box.press("Enter")  # and the habit of pressing Enter after it
    tab.settle()
    tab.page.wait_for_timeout(400)
    tab.settle()
    # the grid and the chosen head, once: one request for both where the text may not fit the heatmap's
    # cells (the grid's answer then carries the chosen head's `focus`), else two
    asked = 1 if tab.page.evaluate("() => 'focus' in window.attnscope.state.grid.response") else 2
    assert attention_posts(tab) == before + asked
    box.press("Enter")  # nothing new to ask
    tab.page.wait_for_timeout(400)
    assert attention_posts(tab) == before + asked
    assert tab.page.get_by_test_id("error-banner").is_hidden()
    box.press("End")
    box.press_sequentially(" more")
    tab.settle()
    assert attention_posts(tab) > before + asked  # an edit is asked for


def test_enter_asks_again_after_a_failed_request(tab):
    tab.open("/#text=" + quote(SENTENCE))
    page = tab.page
    heads = page.get_by_test_id("head-select")
    first = heads.input_value()
    heads.select_option("1" if first != "1" else "0")  # another head, answered
    tab.settle()
    busy = {"status": 503, "content_type": "application/json", "body": '{"detail": "the model is not loaded yet"}'}
    page.route("**/api/attention", lambda route: route.fulfill(**busy))
    heads.select_option(first)  # back to the head the text was first asked with: this answer fails
    banner = page.get_by_test_id("error-banner")
    banner.wait_for(state="visible", timeout=10_000)
    page.unroute("**/api/attention")
    before = attention_posts(tab)
    page.get_by_test_id("text-input").press("Enter")  # the same text: asked again, as it failed
    tab.settle()
    assert attention_posts(tab) > before
    assert banner.is_hidden()


def test_a_link_with_an_empty_text_opens_on_the_empty_state(tab):
    tab.open("/#text=")
    assert tab.page.get_by_test_id("empty-state").is_visible()
    assert tab.page.get_by_test_id("error-banner").is_hidden()
    assert attention_posts(tab) == 0


# ------------------------------------------------------------------ a text over the context


def test_the_too_long_message_and_the_counter_say_the_same_number(tab):
    text = FILLER * 6
    detail = tab.refusal(text)[0]
    assert detail["type"] == "too_many_tokens"
    count, limit = detail["ctx"]["count"], detail["ctx"]["limit"]
    tab.open("/#text=" + quote(SENTENCE))
    box = tab.page.get_by_test_id("text-input")
    box.fill(text)
    box.press("Enter")
    tab.settle()
    message = tab.page.get_by_test_id("error-banner").inner_text()
    counter = tab.page.locator("#token-count").inner_text()
    said = [int(n) for n in re.findall(r"(\d+) tokens", message)]
    counted = [int(n) for n in re.findall(r"(\d+) tokens", counter)]
    assert said == [count] and counted == [count], (message, counter)
    assert str(limit) in message and str(limit) in counter


# ------------------------------------------------------------------ a phone-sized window


@pytest.fixture
def phone(browser, server):
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    page = ctx.new_page()
    page.set_default_timeout(90_000)
    yield page
    ctx.close()


def no_sideways_scroll(page) -> None:
    sizes = page.evaluate("() => [document.scrollingElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], f"the page is {sizes[0]} px wide in a {sizes[1]} px window"


def test_at_390_px_nothing_scrolls_sideways_and_every_tab_is_reachable(phone, server):
    phone.goto(server.url + "/#text=" + quote(SENTENCE))
    wait_settled(phone)
    no_sideways_scroll(phone)
    tabs = phone.get_by_role("tab")
    # head, lines, compare, pipeline, variance, q · k, rollout, lens, attribution, patching,
    # two texts, two models, roles
    assert tabs.count() == 13
    for i in range(tabs.count()):
        t = tabs.nth(i)
        t.scroll_into_view_if_needed()
        box = t.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (t.inner_text(), box)
        t.click()
        assert t.get_attribute("aria-selected") == "true"
        wait_settled(phone)
        no_sideways_scroll(phone)
    # a long text and a refused one do not widen the page either
    box = phone.get_by_test_id("text-input")
    box.fill(FILLER * 6)
    box.press("Enter")
    wait_settled(phone)
    no_sideways_scroll(phone)


def test_a_link_past_the_model_or_the_slider_is_clamped_and_explained_in_words(tab):
    """`#off=9.9` on a model without layer 9 is not listed as switched off, a temperature past the
    slider is clamped to it, and one calm notice says both in words."""
    tab.open("/#text=" + quote("The cat sat on the mat.") + "&off=9.9,0.1&temp=1e9")
    page = tab.page
    notice = page.locator("#link-notice")
    assert notice.is_visible()
    words = notice.inner_text()
    assert "L9 · H9" in words and "stays out of it" in words
    assert "temperature 1e9" in words and "using 3" in words
    state = page.evaluate("() => ({ablate: window.attnscope.state.ablate, t: window.attnscope.state.temperature})")
    assert state == {"ablate": [{"layer": 0, "head": 1}], "t": 3}
    assert page.locator("#temperature-value").inner_text() == "3.00"
    assert "1000000000" not in page.inner_text("body")
    assert not tab.unexpected_console_errors()


def test_continue_on_an_empty_box_asks_for_a_text_in_words(tab):
    tab.open("/#text=" + quote("The cat"))
    page = tab.page
    page.get_by_test_id("text-input").fill("")
    tab.settle()
    asked = []
    page.on("request", lambda r: asked.append(r.url) if r.url.endswith("/api/generate") else None)
    page.get_by_test_id("generate-run").click()
    status = page.get_by_test_id("generate-status")
    assert status.inner_text() == "Type a text first: Continue adds tokens after it."
    assert "String should have" not in page.inner_text("body")
    assert asked == []


def test_a_text_over_the_context_offers_its_first_tokens(tab):
    """Refused for its length, the text is not a dead end: one click shows the part that fits,
    cut where the server says the model's context ends."""
    limit = get_json(tab.base_url + "/api/model")["block_size"]
    long_text = "The cat sat on the mat. " * (limit // 3)
    tab.open("/#text=" + quote(long_text))
    page = tab.page
    offer = page.get_by_test_id("error-fit")
    assert offer.is_visible() and offer.inner_text() == f"Show what fits: the first {limit}"
    offer.click()
    tab.settle()
    assert page.get_by_test_id("error-banner").is_hidden()
    shown = page.get_by_test_id("text-input").input_value()
    assert long_text.startswith(shown) and len(shown) < len(long_text)
    assert len(tab.tokens()) == limit
    assert not tab.unexpected_console_errors(allowed=("422",))


def test_a_refused_text_is_not_asked_again_on_every_tab(tab):
    """The server's refusal stands for that text: going through the tabs asks nothing more (a new
    text, or Enter, asks again)."""
    limit = get_json(tab.base_url + "/api/model")["block_size"]
    tab.open("/#text=" + quote("The cat sat on the mat. " * (limit // 3)))
    page = tab.page
    assert page.get_by_test_id("error-fit").is_visible()
    asked = []
    page.on("request", lambda r: asked.append(r.url) if r.url.endswith("/api/attention") else None)
    for name in ["Scaled vs unscaled", "Mask pipeline", "Variance", "Head & grid"]:
        page.get_by_role("tab", name=name, exact=True).click()
        tab.settle()
    assert asked == []
    assert page.get_by_test_id("error-banner").is_visible()
    assert not tab.unexpected_console_errors(allowed=("422",))


def test_what_fits_is_cut_in_characters_as_the_server_counts_them(tab):
    """The server counts code points (as Python does); an emoji is two UTF-16 units in the
    browser, so a cut in UTF-16 units would keep fewer tokens than offered, or split an emoji."""
    limit = get_json(tab.base_url + "/api/model")["block_size"]
    long_text = "The 🐈 sat on the 🧶. " * limit
    tab.open("/#text=" + quote(long_text))
    page = tab.page
    page.get_by_test_id("error-fit").click()
    tab.settle()
    shown = page.get_by_test_id("text-input").input_value()
    assert long_text.startswith(shown)
    assert len(tab.tokens()) == limit
    assert not tab.unexpected_console_errors(allowed=("422",))


def test_a_new_link_forgets_what_the_last_link_said(tab):
    """Following a link (the hash changes) gives the settings it names and defaults for the rest:
    the last link's sampling switch and its notice do not carry over."""
    tab.open("/#text=The%20cat&temp=1e9&sample=1&seed=7")
    page = tab.page
    assert page.get_by_test_id("link-notice").is_visible()
    page.evaluate("() => { window.location.hash = '#text=The%20dog'; }")
    page.wait_for_function("() => window.attnscope.state.text === 'The dog'")
    tab.settle()
    assert page.evaluate("() => window.attnscope.state.sampling") == {
        "on": False,
        "top_k": None,
        "top_p": None,
        "seed": None,
    }
    assert page.get_by_test_id("link-notice").is_hidden()
    assert not page.get_by_test_id("generate-sample").is_checked()


def test_a_bad_sampling_value_stops_continue_and_is_named(tab):
    """Issue 32, item 8: a bad top-k or top-p keeps Continue from starting (no request leaves, as
    the server would refuse it) and the note names the field; a good value lets it start."""
    tab.open("/#text=" + quote("The cat sat on the mat.") + "&sample=1")
    page = tab.page
    bodies = []
    page.on("request", lambda r: bodies.append(r.post_data_json) if r.url.endswith("/api/generate") else None)
    page.get_by_test_id("generate-count").fill("1")
    note = page.get_by_test_id("generate-note")
    run = page.get_by_test_id("generate-run")
    for testid, bad, words in (
        ("generate-topp", "1.5", "top-p 1.5 is not a number above 0 and at most 1"),
        ("generate-topk", "0", "top-k 0 is not a whole number from 1 to 2147483647"),
    ):
        box = page.get_by_test_id(testid)
        box.fill(bad)
        box.dispatch_event("change")
        assert note.is_visible() and words in note.inner_text() and "ignored" not in note.inner_text()
        run.click(force=True)  # a click on the refusing button starts nothing
        page.wait_for_timeout(300)
        assert bodies == [] and page.evaluate("() => window.attnscope.state.generation") is None
        assert box.input_value() == bad  # what was typed stays beside the note
        box.fill("")
        box.dispatch_event("change")
    page.get_by_test_id("generate-topp").fill("0.5")
    page.get_by_test_id("generate-topp").dispatch_event("change")
    assert "top-p" not in note.inner_text()
    run.click()
    page.wait_for_function("() => document.querySelector('[data-testid=generate]').dataset.reason !== undefined")
    assert bodies and bodies[-1]["top_p"] == 0.5 and bodies[-1]["do_sample"] is True


def test_at_390_px_the_pipeline_stands_in_two_rows_and_the_toggles_take_a_finger(tab):
    page = tab.page
    page.set_viewport_size({"width": 390, "height": 900})
    long_enough = "The cat sat on the mat because the mat was warm. Then the cat saw the dog and the dog sat."
    tab.open("/#view=pipeline&text=" + quote(long_enough))
    page.wait_for_function("() => document.querySelector('[data-testid=mask-steps]')?._fullLayout")
    boxes = page.evaluate(
        """() => {
            const gd = document.querySelector('[data-testid=mask-steps]');
            const L = gd._fullLayout;
            const axes = Object.keys(L).filter((k) => /^xaxis\\d*$/.test(k)).sort();
            const titles = [...gd.querySelectorAll('.annotation')].map((a) => a.getBoundingClientRect())
                .map((r) => ({left: r.left, right: r.right, top: r.top, bottom: r.bottom}));
            const sumsNote = L.annotations.some((a) => a.textangle === -90);
            return {widths: axes.map((k) => L[k]._length), titles, sumsNote};
        }"""
    )
    steps = boxes["widths"][:-1]  # the last axis is the Σ row column
    assert len(steps) == 4 and min(steps) > 120, boxes["widths"]  # two a row, not four slivers
    titles = boxes["titles"]
    overlaps = [
        (a, b)
        for i, a in enumerate(titles)
        for b in titles[i + 1 :]
        if a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]
    ]
    assert overlaps == []
    assert boxes["sumsNote"]  # past 20 tokens the row sums' range is written along their column

    tab.open("/#view=head&text=" + quote(long_enough))
    toggle = page.locator("[data-testid=heads-grid] .ablate-toggle").first
    toggle.wait_for()
    toggle.scroll_into_view_if_needed()
    box = toggle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    for dx, dy in ((15, 0), (-15, 0), (0, 15), (0, -15)):
        hit = page.evaluate(
            "([x, y]) => document.elementFromPoint(x, y)?.classList.contains('ablate-toggle')", [x + dx, y + dy]
        )
        assert hit, (dx, dy)


# ------------------------------------------------------------------ the tab groups' labels on a desktop


@pytest.mark.parametrize("width", [1280, 1440])
def test_each_tab_group_label_shows_whole_inside_the_scrolling_tab_row(tab, width):
    """The labels stand over their tabs inside .tabs, which scrolls sideways and so clips vertically too:
    each label in sight lies within the row's box and is what the page shows at its top edge (issue 42, 10)."""
    tab.open_at(width, "/")
    seen = tab.page.evaluate(
        """() => {
            const row = document.getElementById('tabs').getBoundingClientRect();
            return [...document.querySelectorAll('.tab-group-label')].map((label) => {
                const box = label.getBoundingClientRect();
                const x = Math.min(box.left + 2, innerWidth - 1);
                return { text: label.textContent, top: box.top, bottom: box.bottom, left: box.left,
                         rowTop: row.top, rowBottom: row.bottom,
                         hit: label.contains(document.elementFromPoint(x, box.top + 0.5)) };
            });
        }"""
    )
    assert len(seen) >= 4
    for label in (s for s in seen if s["left"] < width - 2):
        assert label["rowTop"] <= label["top"] < label["bottom"] <= label["rowBottom"], label
        assert label["hit"], label
