"""The Mask pipeline on an encoder–decoder (a tiny BART built in the test): each stack's steps are its own matrix,
rows the query side's tokens and columns the key side's (the source's on the cross stack), the sides named under
the panels and in each hover, the mask step "all visible" on the encoder and cross stacks and the triangle on the
decoder's, and no word of a causal mask where the stack has none. At 1280 and 390 px."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.kit.live import post_json, serving, wait_settled

pytest.importorskip("transformers")
pytestmark = pytest.mark.browser

from tests.kit.seq2seq import build_seq2seq  # noqa: E402

TEXT = "The cat sat on the mat, and the dog saw the cat."
TARGET = "The dog sat on the mat."
STEPS = """() => { const gd = document.querySelector('[data-testid=mask-steps]');
  return { z: gd.data[0].z.length && [gd.data[0].z.length, gd.data[0].z[0].length], cd: gd.data[0].customdata,
    notes: gd.layout.annotations.map((a) => a.text).join(' | ') }; }"""


@pytest.fixture(scope="module")
def s2s_server(tmp_path_factory, server):
    with serving(build_seq2seq("bart", tmp_path_factory.mktemp("bartpipe") / "bart"), "bart") as s:
        yield s


@pytest.mark.parametrize("width", [1280, 390])
def test_each_stack_steps_name_their_sides_and_their_mask(tab, s2s_server, width):
    tab.base_url = s2s_server.url
    page = tab.page
    body = {"text": TEXT, "target": TARGET, "stack": "cross", "layers": [], "include": [], "top_k": 0}
    served = post_json(s2s_server.url + "/api/attention", body)
    source, target = served["source_tokens"], served["target_tokens"]
    assert len(source) != len(target)
    for stack, (queries, keys) in {
        "cross": (target, source),
        "encoder": (source, source),
        "decoder": (target, target),
    }.items():
        tab.open_at(width, f"/#view=pipeline&stack={stack}&text={quote(TEXT)}&target={quote(TARGET)}")
        page.wait_for_function("(s) => window.attnscope.state.detail?.response?.stack === s", arg=stack)
        wait_settled(page)
        page.wait_for_function("() => document.querySelector('[data-testid=mask-steps]')?.data?.length > 0")
        steps = page.evaluate(STEPS)
        assert steps["z"] == [len(queries), len(keys)]
        q_side = "source" if stack == "encoder" else "target"
        k_side = "target" if stack == "decoder" else "source"
        assert f"rows: query: {q_side}" in steps["notes"] and f"columns: key: {k_side}" in steps["notes"]
        # each hover names its query and key with their side, the key from the key side's tokens
        assert steps["cd"][0][-1] == [f"{q_side} 0 {queries[0]}", f"{k_side} {len(keys) - 1} {keys[-1]}"]
        notes = page.locator("#pipeline-notes").inner_text()
        if stack == "decoder":
            assert "masked_fill(−∞)" in steps["notes"] and "all visible" not in steps["notes"]
            assert "look ahead" in notes
        else:
            assert "all visible" in steps["notes"] and "what-if" not in steps["notes"]
            assert "look ahead" not in notes and "causal" not in notes.lower() and "what-if" not in notes
            assert ("cross-attention masks nothing" if stack == "cross" else "encoder masks nothing") in notes
    assert not tab.unexpected_console_errors()
