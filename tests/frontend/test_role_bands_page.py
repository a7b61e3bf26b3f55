"""A conversation's roles as bands on the token axes, drawn from `/api/model` `fields` (the `spans` row) and the
answer's `spans`, the way the image's band is: a bar per message along the keys (top) and the queries (left)
of the head's map and of the scaling view's two maps, in its role's colour, the token strip's chips underlined
in it, and the caption naming each message's role and tokens. At 1280 and 390 px wide.

The page has no box for messages yet: the test sends the page's own requests with the conversation in place of
the text (a route on /api/attention), so what is drawn is the server's answer to a conversation.
"""

from __future__ import annotations

import json

import pytest

from tests.kit.live import post_json, serving

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.chat import CONVERSATION, build_chat  # noqa: E402


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory, server):
    with serving(build_chat(tmp_path_factory.mktemp("chat") / "chat"), "chat") as s:
        yield s


@pytest.fixture
def chat_tab(tab, chat_server):
    """``tab`` on the chat model, every attention request of the page asking about :data:`CONVERSATION`."""
    tab.base_url = chat_server.url

    def as_conversation(route):
        body = json.loads(route.request.post_data or "{}")
        if "text" not in body:
            return route.continue_()
        del body["text"]
        route.continue_(post_data=json.dumps({**body, "messages": CONVERSATION}))

    tab.page.route("**/api/attention", as_conversation)
    return tab


def bars(fig: dict) -> list[dict]:
    """The figure's bands: its named shapes (a band's bar says what it is)."""
    return [s for s in fig["layout"].get("shapes", []) if s.get("name")]


@pytest.mark.parametrize("width", [1280, 390])
def test_each_message_is_a_band_in_its_roles_colour_on_every_token_axis(chat_tab, width):
    tab = chat_tab
    page = tab.page
    tab.open_at(width, "/#layer=1&head=0&text=hello")
    model = page.evaluate("() => window.attnscope.state.model")
    assert model["chat"] is True
    row = next(f for f in model["fields"] if f["name"] == "spans")
    served = post_json(tab.base_url + "/api/attention", {"messages": CONVERSATION, "top_k": 0})
    spans = served["spans"]
    assert [s["role"] for s in spans] == [m["role"] for m in CONVERSATION]
    page.wait_for_function("() => window.attnscope.state.grid.response?.spans")
    assert page.evaluate("() => window.attnscope.state.grid.response.tokens") == served["tokens"]
    # the head's map: a bar along the keys and one along the queries for each message, over its own tokens
    drawn = bars(tab.figure("head-heatmap"))
    assert len(drawn) == 2 * len(spans)
    for s in spans:
        mine = [b for b in drawn if b["name"].startswith(f"message {s['message']}:")]
        assert len(mine) == 2 and all(s["role"] in b["name"] for b in mine)
        top = next(b for b in mine if b["yref"] == "y domain")
        left = next(b for b in mine if b["xref"] == "x domain")
        assert (top["x0"], top["x1"]) == (s["start"] - 0.5, s["end"] - 0.5)
        assert (left["y0"], left["y1"]) == (s["start"] - 0.5, s["end"] - 0.5)
    # a colour per role, the same for every message of that role, as many colours as roles
    colour = {}
    for s in spans:
        fill = next(b["fillcolor"] for b in drawn if b["name"].startswith(f"message {s['message']}:"))
        assert colour.setdefault(s["role"], fill) == fill
    assert len(set(colour.values())) == len(colour) == len(set(row["values"]) & {s["role"] for s in spans})
    # under the head, the share of its last row each message took: the server's span_mass, by role, said once
    shares = served["span_mass"][1][0]  # layer 1, head 0
    rows = page.locator("[data-testid=span-mass-rows] li")
    rows.first.wait_for()
    assert [float(rows.nth(i).get_attribute("data-share")) for i in range(rows.count())] == shares
    assert [rows.nth(i).get_attribute("data-role") for i in range(rows.count())] == [s["role"] for s in spans]
    title = page.locator("#head-title").inner_text()
    assert title.startswith("Layer 1 · head 0") and not any(f"{m:.3f}" in title for m in shares)
    # the caption names each message's role and tokens, the strip underlines each message's chips
    words = page.locator("#head-rows").inner_text()
    for s in spans:
        assert f"{s['role']} {s['start']}–{s['end'] - 1}" in words
    roles = page.evaluate(
        "() => [...document.querySelectorAll('[data-testid=tokens] .chip[data-index]')]"
        ".map((c) => c.dataset.role ?? '')"
    )
    expected = [next((s["role"] for s in spans if s["start"] <= i < s["end"]), "") for i in range(len(roles))]
    assert roles == expected and any(r == "" for r in roles)  # the template's markup is in no message
    page.screenshot(path=f"/tmp/role-bands-head-{width}.png", full_page=True)
    # the scaling view's two maps carry the same bands
    page.locator("#tab-scaling").click()
    tab.settle()
    for testid in ("scaling-scaled", "scaling-unscaled"):
        page.wait_for_function("(id) => document.querySelector(`[data-testid='${id}']`)?.data", arg=testid)
        assert sorted(b["name"] for b in bars(tab.figure(testid))) == sorted(b["name"] for b in drawn)
    page.screenshot(path=f"/tmp/role-bands-{width}.png", full_page=True)
    # the mask pipeline: every step's panel has a bar a message along its keys and its queries
    page.locator("#tab-pipeline").click()
    tab.settle()
    page.wait_for_function("() => document.querySelector('[data-testid=mask-steps]')?.data")
    steps = tab.figure("mask-steps")
    panels = {(t["xaxis"], t["yaxis"]) for t in steps["data"] if t.get("coloraxis")}
    assert len(bars(steps)) == 2 * len(spans) * len(panels) and len(panels) >= 4
    page.screenshot(path=f"/tmp/role-bands-steps-{width}.png", full_page=True)
    assert not tab.unexpected_console_errors()
