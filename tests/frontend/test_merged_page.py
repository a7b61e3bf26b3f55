"""The page on an encoder–decoder whose decoder runs one softmax over its own tokens and the source's (a tiny
T5Gemma 2 built in the test, served by the real server): the stack picker's note says the decoder and cross
stacks share that softmax (GET /api/model `stacks` `merged_softmax`, frontend/js/stacks.js), and the cross map's
cells are the server's; the encoder stack has no note. At 1280 and 390 px."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import get_json, post_json, serving, wait_settled

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.seq2seq import build_seq2seq  # noqa: E402

TEXT = "The cat sat on the mat, and the dog saw the cat."
TARGET = "The dog sat on the mat."


@pytest.fixture(scope="module")
def merged_server(tmp_path_factory, server):
    with serving(build_seq2seq("t5gemma2", tmp_path_factory.mktemp("t5g2") / "m"), "t5gemma2") as s:
        yield s


@pytest.mark.parametrize("width", [1280, 390])
def test_the_stack_note_says_decoder_and_cross_share_one_softmax(tab, merged_server, width):
    tab.base_url = merged_server.url
    page = tab.page
    stacks = {s["name"]: s for s in get_json(merged_server.url + "/api/model")["stacks"]}
    assert [stacks[n]["merged_softmax"] for n in ("encoder", "decoder", "cross")] == [False, True, True]
    tab.open_at(width, f"/#stack=cross&text={quote(TEXT)}&target={quote(TARGET)}")
    page.wait_for_function("() => window.attnscope.state.detail?.response?.stack === 'cross'")
    wait_settled(page)
    note = page.get_by_test_id("stack-note")
    assert note.is_visible() and tab.inside("stack-picker", width)
    words = note.inner_text()
    assert "One softmax with the Decoder stack" in words and "add up to 1 together" in words
    # the cross map: the server's cells, rows that are one block of the merged row
    layer, head = page.evaluate("() => [window.attnscope.state.layer, window.attnscope.state.head]")
    body = {"text": TEXT, "target": TARGET, "layers": [layer], "include": ["pattern"], "encoding": "json"}
    parts = {s: post_json(merged_server.url + "/api/attention", {**body, "stack": s, "top_k": 0}) for s in stacks}
    z = tab.figure("head-heatmap")["data"][0]["z"]
    cross = parts["cross"]["layers"][0]["heads"][head]["pattern"]
    assert all(abs(a - b) < 1e-4 for zr, pr in zip(z, cross, strict=True) for a, b in zip(zr, pr) if a is not None)
    own = parts["decoder"]["layers"][0]["heads"][head]["pattern"]
    sums = [(sum(c), sum(d)) for c, d in zip(cross, own, strict=True)]  # the cells are sent to 5 decimals
    assert all(abs(c + d - 1) < 1e-3 for c, d in sums) and any(c < 0.9 for c, _ in sums)
    # the encoder's stack: its own softmax, no note
    page.get_by_test_id("stack-encoder").click()
    page.wait_for_function("() => window.attnscope.state.detail?.response?.stack === 'encoder'")
    assert not note.is_visible()
