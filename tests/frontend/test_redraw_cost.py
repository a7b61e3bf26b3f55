"""What a keystroke redraws (issue 31, item 10): the token strip keeps the chips that did not
change, and the fields of an answer that no view on screen draws are decoded only when read.
Each test checks the page against the server's own answer."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.kit.live import post_json

pytestmark = pytest.mark.browser

SENTENCE = "The cat sat on the mat because the mat was warm."


def server_tokens(base_url: str, text: str) -> dict:
    return post_json(base_url + "/api/attention", {"text": text, "layers": [], "include": [], "top_k": 0})


def test_a_keystroke_at_the_end_keeps_the_chips_before_it(tab):
    tab.open("/#text=" + quote(SENTENCE))
    # tag every chip: a chip the page rebuilt has no tag
    n = tab.page.evaluate(
        """() => { const chips = [...document.querySelectorAll('[data-testid=tokens] .chip')];
                   chips.forEach((c, i) => { c.__kept = i; }); return chips.length; }"""
    )
    box = tab.page.get_by_test_id("text-input")
    box.press("End")
    box.press_sequentially(" It")
    tab.settle()
    text = SENTENCE + " It"
    answer = server_tokens(tab.base_url, text)
    chips = tab.page.evaluate(
        """() => [...document.querySelectorAll('[data-testid=tokens] .chip')].map((c) => ({
              kept: c.__kept ?? null, index: Number(c.dataset.index), title: c.title,
              text: c.querySelector('.chip-text').textContent, id: c.querySelector('.chip-id').textContent }))"""
    )
    # the strip is the new answer's, chip for chip
    assert [c["text"] for c in chips] == answer["tokens"]
    assert [c["id"] for c in chips] == [str(i) for i in answer["token_ids"]]
    assert [c["index"] for c in chips] == list(range(len(answer["tokens"])))
    for c, (start, end) in zip(chips, answer["offsets"], strict=True):
        assert c["title"].startswith(f"position {c['index']} · ")
        assert c["title"].endswith(f"characters {start}–{end}: " + json.dumps(text[start:end]))
    # the chips before the edit are the same elements: only the changed end was built
    kept = [c["kept"] for c in chips]
    assert kept[: n - 1] == list(range(n - 1))
    assert kept[-1] is None


def test_a_field_no_view_draws_is_decoded_when_read_and_then_equals_the_answer(tab):
    tab.open("/#view=head&text=" + quote(SENTENCE))
    state = tab.page.evaluate(
        """() => { const h = window.attnscope.state.detail.response.layers[0].heads[0];
                   const lazy = (k) => typeof Object.getOwnPropertyDescriptor(h, k).get === 'function';
                   const before = { q: lazy('q'), k: lazy('k'), pattern: lazy('pattern') };
                   const q = h.q;
                   return { before, after: lazy('q'), q, layer: window.attnscope.state.layer,
                            head: window.attnscope.state.head }; }"""
    )
    # the head view draws the pattern; q and k wait until something reads them
    assert state["before"] == {"q": True, "k": True, "pattern": False}
    assert state["after"] is False
    plain = post_json(
        tab.base_url + "/api/attention",
        {"text": SENTENCE, "layers": [state["layer"]], "heads": [state["head"]], "include": ["q"], "top_k": 0},
    )
    want = plain["layers"][0]["heads"][0]["q"]
    got = state["q"]
    assert len(got) == len(want) and len(got[0]) == len(want[0])
    assert max(abs(a - b) for ra, rb in zip(got, want, strict=True) for a, b in zip(ra, rb, strict=True)) < 1e-4
