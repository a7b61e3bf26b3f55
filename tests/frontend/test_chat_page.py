"""The conversation beside the text on a chat model (frontend/js/cards/chat.js): turns added, removed, moved
and given a role, a system prompt first. The page then sends `messages` instead of the text (subject.js), the
link keeps the conversation, and the answer is drawn again, with each turn's share of the last token's weight
for the chosen head (head/spans.js) as the server sends it. At 1280 and 390 px."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.kit.live import post_json, serving, wait_settled

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.frontend.test_redraw_cost import WATCH_MUTATIONS  # noqa: E402
from tests.kit.chat import CONVERSATION, build_chat  # noqa: E402

TEXT = CONVERSATION[1]["content"]


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory, server):
    root = tmp_path_factory.mktemp("chat")
    with serving(build_chat(root / "chat"), "chat") as s:
        yield s


def state(page, field):
    return page.evaluate(f"() => window.attnscope.state.{field}")


def grid_bodies(bodies):
    """The bodies of the page's grid requests (every head as a thumbnail), in order."""
    return [b for b in bodies if b.get("thumbnail") == 64]


def check_answer(tab, bodies, width):
    """The page sent the editor's turns as `messages` (no text), and drew the answer to them: as many spans as
    turns, with their roles, and the chosen head's shares in the box, the server's own numbers."""
    page = tab.page
    wait_settled(page)
    messages = state(page, "messages")
    sent = grid_bodies(bodies)[-1]
    assert sent["messages"] == messages and "text" not in sent
    spans = state(page, "grid.response.spans")
    assert [s["role"] for s in spans] == [m["role"] for m in messages]
    served = post_json(tab.base_url + "/api/attention", {**sent, "encoding": "json"})
    layer, head = state(page, "layer"), state(page, "head")
    rows = page.locator("[data-testid=span-mass-rows] li")
    rows.first.wait_for()
    assert rows.count() == len(messages)
    shares = [float(rows.nth(i).get_attribute("data-share")) for i in range(rows.count())]
    assert shares == served["span_mass"][layer][head]
    assert [rows.nth(i).get_attribute("data-role") for i in range(rows.count())] == [m["role"] for m in messages]
    assert tab.inside("chat-field", width)


def turn(page, i):
    return page.locator("[data-testid=chat-turn]").nth(i)


@pytest.mark.parametrize("width", [1280, 390])
def test_a_conversation_is_written_sent_redrawn_and_linked(tab, chat_server, width):
    tab.base_url = chat_server.url
    bodies = []
    tab.page.on(
        "request",
        lambda r: bodies.append(json.loads(r.post_data)) if r.url.endswith("/api/attention") and r.post_data else None,
    )
    tab.open_at(width, "/#text=" + quote(TEXT))
    page = tab.page
    assert "text" in grid_bodies(bodies)[-1] and "messages" not in grid_bodies(bodies)[-1]
    page.get_by_test_id("chat-start").click()
    assert state(page, "messages") == [{"role": "user", "content": TEXT}]
    check_answer(tab, bodies, width)

    # add turns (the assistant answers the user, a user follows), type them, and put a system prompt first
    page.get_by_test_id("chat-add").click()
    turn(page, 1).get_by_test_id("chat-content").fill(CONVERSATION[2]["content"])
    page.get_by_test_id("chat-add").click()
    turn(page, 2).get_by_test_id("chat-content").fill(CONVERSATION[3]["content"])
    page.get_by_test_id("chat-system").click()
    turn(page, 0).get_by_test_id("chat-content").fill(CONVERSATION[0]["content"])
    assert state(page, "messages") == CONVERSATION
    check_answer(tab, bodies, width)

    # move the assistant's turn down, past the last user's
    turn(page, 2).get_by_test_id("chat-down").click()
    assert [m["role"] for m in state(page, "messages")] == ["system", "user", "user", "assistant"]
    check_answer(tab, bodies, width)

    # its role changed: a user's now
    turn(page, 3).get_by_test_id("chat-role").select_option("user")
    assert [m["role"] for m in state(page, "messages")] == ["system", "user", "user", "user"]
    check_answer(tab, bodies, width)

    # one removed
    turn(page, 2).get_by_test_id("chat-remove").click()
    kept = state(page, "messages")
    assert [m["content"] for m in kept] == [CONVERSATION[0]["content"], TEXT, CONVERSATION[2]["content"]]
    check_answer(tab, bodies, width)
    page.screenshot(path=f"/tmp/chat-{width}.png", full_page=True)

    # the link keeps the conversation: opened again, the same turns, sent and drawn
    page.wait_for_function("() => window.location.hash.includes('chat=')")
    link = page.evaluate("() => window.location.hash")
    tab.open_at(width, "/" + link)
    assert state(page, "messages") == kept
    contents = page.locator("[data-testid=chat-content]")
    assert [contents.nth(i).input_value() for i in range(contents.count())] == [m["content"] for m in kept]
    check_answer(tab, bodies, width)

    # back to the text: the text is sent again
    page.get_by_test_id("chat-stop").click()
    wait_settled(page)
    assert "text" in grid_bodies(bodies)[-1] and "messages" not in grid_bodies(bodies)[-1]
    assert page.locator("[data-testid=span-mass]").is_hidden()
    assert not tab.unexpected_console_errors()


@pytest.mark.parametrize("width", [1280, 390])
def test_the_grid_paints_each_heads_turns_and_a_refused_order_is_said(tab, chat_server, width):
    tab.base_url = chat_server.url
    messages = quote(json.dumps([[m["role"], m["content"]] for m in CONVERSATION]))
    tab.open_at(width, f"/#text={quote(TEXT)}&chat={messages}")
    page = tab.page
    switch = page.get_by_test_id("grid-spans")
    switch.check()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=grid-caption]').innerText.includes(\"in its role's colour\")"
    )
    assert state(page, "gridSpans") is True
    # a render that changes nothing writes nothing: the editor, the turns' box and the grid's switch included
    chip = page.locator("[data-testid=tokens] .chip").last
    chip.click()
    wait_settled(page)
    page.evaluate(WATCH_MUTATIONS)
    renders = page.evaluate("() => window.attnscope.renders")
    chip.click()
    wait_settled(page)
    page.wait_for_timeout(100)  # the observer's records come after the render's task
    assert page.evaluate("() => window.attnscope.renders") == renders + 1
    assert page.evaluate("() => window.__mutations") == []
    # a conversation that opens with the assistant: the template refuses it, the page says the server's words
    turn(page, 0).get_by_test_id("chat-remove").click()
    turn(page, 0).get_by_test_id("chat-remove").click()
    assert [m["role"] for m in state(page, "messages")] == ["assistant", "user"]
    wait_settled(page)
    assert "messages" in state(page, "error")
    page.screenshot(path=f"/tmp/chat-refused-{width}.png", full_page=True)
    assert not tab.unexpected_console_errors(allowed=("422",))
