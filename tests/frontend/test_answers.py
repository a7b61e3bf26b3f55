"""The one layer of a view's own requests (frontend/js/answers.js, `ask`): a question is keyed by its url and
body, only the latest question of a slot is drawn, and a question the server refused is not sent again
unchanged. First the layer alone, in the page, with the browser's fetch held by the test; then a view (Rollout)
drawing through it."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import HOLD_FETCH, post_json

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat. The dog sat on the log."

# ask alone, on a slot of its own: two questions, their answers landing in the other order.
TWO_QUESTIONS = """async () => {
  const { ask, questionKey } = await import("/js/answers.js");
  const app = { state: {}, updates: 0, update() { this.updates += 1; } };
  const first = ask(app, "slot", "/api/rollout", { text: "one two three", position: 1 });
  const second = ask(app, "slot", "/api/rollout", { text: "one two three", position: 2 });
  await window.__release(1);
  await second;
  const afterLatest = structuredClone(app.state.slot);
  await window.__release(0);
  await first;
  const latestKey = questionKey("/api/rollout", { position: 2, text: "one two three" }); // keys in another order
  return { afterLatest, final: app.state.slot, updates: app.updates, latestKey };
}"""

# ask alone: a refused question asked three times more (its body's keys in any order), then a changed one.
REFUSED = """async () => {
  const { ask } = await import("/js/answers.js");
  const app = { state: {}, update() {} };
  window.__answer = { status: 422, body: { detail: "position: at most 2" } };
  await ask(app, "slot", "/api/rollout", { text: "one two", position: 9 });
  for (let i = 0; i < 3; i++) await ask(app, "slot", "/api/rollout", { position: 9, text: "one two" });
  const refused = structuredClone(app.state.slot);
  await ask(app, "slot", "/api/rollout", { text: "one two", position: 1 });
  return { refused, asked: window.__asked.map((a) => a.body.position) };
}"""


def test_only_the_latest_question_of_a_slot_is_kept(tab):
    tab.open("/")
    tab.page.evaluate(HOLD_FETCH, "/api/rollout")
    got = tab.page.evaluate(TWO_QUESTIONS)
    assert got["afterLatest"]["key"] == got["latestKey"] and got["afterLatest"]["response"]["position"] == 2
    # the older answer landed last and was dropped: the slot still holds the latest question's answer
    assert got["final"] == got["afterLatest"]
    assert got["updates"] == 2


def test_a_refused_question_is_not_sent_again_unchanged(tab):
    tab.open("/")
    tab.page.evaluate(HOLD_FETCH, "/api/rollout")
    got = tab.page.evaluate(REFUSED)
    assert got["refused"]["body"]["position"] == 9 and got["refused"]["response"] is None
    assert "at most 2" in got["refused"]["error"]
    assert got["asked"] == [9, 1]  # asked once, however often a redraw asks; a changed question goes out


def test_the_rollout_view_draws_the_token_chosen_last_when_answers_cross(tab):
    """Two tokens chosen quickly: the first one's answer lands after the second's and is never drawn."""
    page = tab.page
    tab.open("/#view=rollout&pos=5&text=" + quote(TEXT))
    page.wait_for_function("() => document.querySelector('[data-testid=rollout-plot]')?.data")
    page.evaluate(HOLD_FETCH, "/api/rollout")
    chips = page.locator("[data-testid=tokens] .chip")
    chips.nth(2).click()
    page.wait_for_function("() => window.__asked.length === 1")
    chips.nth(3).click()
    page.wait_for_function("() => window.__asked.length === 2")
    assert [a["body"]["position"] for a in page.evaluate("() => window.__asked")] == [2, 3]
    page.evaluate("() => window.__release(1)")
    page.wait_for_function("() => window.attnscope.state.rollout?.response?.position === 3")
    renders = page.evaluate("() => window.attnscope.renders")
    page.evaluate("() => window.__release(0)")
    page.wait_for_function(f"() => window.attnscope.renders > {renders}")  # the late answer landed
    served = post_json(tab.base_url + "/api/rollout", {"text": TEXT, "position": 3})
    assert tab.figure("rollout-plot")["data"][0]["z"] == served["rollout"]
    assert "(token 3)" in page.get_by_test_id("rollout-caption").inner_text()
    assert page.evaluate("() => window.attnscope.state.rollout.response.position") == 3
    assert len(page.evaluate("() => window.__asked")) == 2
    assert not tab.unexpected_console_errors()


# The grid's and the chosen head's keys against the bodies sent: each change of the page's state, one at a time.
KEYS_AND_BODIES = """async () => {
  const { gridKey, headKey } = await import("/js/state.js");
  const { detailRequest, gridRequest } = await import("/js/requests.js");
  const base = window.attnscope.state;
  const changes = [{ text: "another text" }, { causal: false }, { scaled: false }, { ablate: [{ layer: 0, head: 1 }] },
    { layer: 1 }, { head: 1 }, { temperature: 2 }, { drawCells: 64 }, { view: "lines" }, { position: 2 }];
  const seen = (s) => ({ grid: gridKey(s), head: headKey(s), gridBody: gridRequest(s), headBody: detailRequest(s) });
  return { before: seen(base), after: changes.map((c) => ({ change: c, ...seen({ ...base, ...c }) })) };
}"""

HOW = {"include", "thumbnail", "focus", "encoding", "precision", "top_k", "temperature", "stats_rows",
       "stats_unscaled"}  # how an answer comes: the same question answered in another form


def test_the_grid_and_the_head_are_keyed_by_what_their_bodies_ask(tab):
    """A change of the state changes an answer's key exactly when it changes what its request's body asks (the
    subject, the layers and heads), never when it changes only how the answer comes (the temperature, pooling)."""
    tab.open("/#text=" + quote(TEXT))
    tab.page.wait_for_function("() => window.attnscope.state.model && window.attnscope.state.grid")
    got = tab.page.evaluate(KEYS_AND_BODIES)
    asks = lambda body: {k: v for k, v in body.items() if k not in HOW}  # noqa: E731
    before = got["before"]
    moved = {"grid": 0, "head": 0, "how": 0}
    for after in got["after"]:
        for kind in ("grid", "head"):
            changed = asks(after[kind + "Body"]) != asks(before[kind + "Body"])
            assert (after[kind] != before[kind]) == changed, (kind, after["change"])
            moved[kind] += changed
        moved["how"] += after["headBody"] != before["headBody"] and after["head"] == before["head"]
    assert moved["grid"] >= 4 and moved["head"] >= 6 and moved["how"] >= 1  # the examples reach every case
