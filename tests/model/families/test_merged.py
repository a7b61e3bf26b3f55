"""T5Gemma 2's merged attention (model/families/merged.py): one softmax over the decoder's keys and the encoder's,
shown as the decoder stack's block and the cross stack's block of the same rows (each equal to transformers eager
in tests/model/families/test_seq2seq.py); here: the two blocks add up to one row, the model says they share it,
a knockout renormalises over both, and generation's rows are the teacher-forced ones."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.families.attention import recording, stacked  # noqa: E402
from attnscope.model.options import AttentionOptions  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.seq2seq import build_seq2seq  # noqa: E402

SOURCE = "The cat sat on the mat. Then the dog saw the cat."
TARGET = "A dog sat on the log."


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return load_model(build_seq2seq("t5gemma2", tmp_path_factory.mktemp("t5gemma2") / "m"), device="cpu")


@pytest.fixture(scope="module")
def pair(lm):
    return lm.tokenizer.encode_ids(SOURCE), lm.backend.read_target(TARGET)[0]


def blocks(lm, source, target, stack="decoder", opts=None):
    """One pass looking at ``stack`` (its what-ifs ``opts``): the decoder stack's and the cross stack's patterns of
    that pass, layer by layer, (nh, T, T) and (nh, T, S); the other block is recorded beside, as generation does."""
    other = "cross" if stack == "decoder" else "decoder"
    traces: dict[str, list] = {stack: [], other: []}
    backend = lm.backend
    src = backend.source_input(source)
    tgt = torch.tensor([target])
    with (
        torch.inference_mode(),
        recording(traces[stack], opts or AttentionOptions()),
        stacked(backend.places, stack, {other: traces[other]}),
    ):
        backend.decode(tgt, backend.encode(src))
    return [t.pattern[0] for t in traces["decoder"]], [t.pattern[0] for t in traces["cross"]]


def test_the_model_says_its_decoder_and_cross_stacks_share_one_softmax(lm, tmp_path):
    merged = {s["name"]: s["merged_softmax"] for s in lm.facts.stacks}
    assert merged == {"encoder": False, "decoder": True, "cross": True}
    t5 = load_model(build_seq2seq("t5", tmp_path / "t5"), device="cpu")
    assert not any(s["merged_softmax"] for s in t5.facts.stacks)


def test_the_two_blocks_of_a_row_add_up_to_one_together(lm, pair):
    source, target = pair
    dec, cross = blocks(lm, source, target)
    assert len(dec) == len(cross) == lm.facts.stacks[1]["n_layer"]
    for d, c in zip(dec, cross, strict=True):
        assert d.shape[-1] == len(target) and c.shape[-1] == len(source)
        total = d.sum(-1) + c.sum(-1)  # (nh, T)
        torch.testing.assert_close(total, torch.ones_like(total), atol=1e-5, rtol=0)
        assert bool((c.sum(-1) < 1 - 1e-3).any()) and bool((d.sum(-1) < 1 - 1e-3).any())  # neither part alone


@pytest.mark.parametrize("stack", ["decoder", "cross"])
def test_a_knockout_in_one_block_renormalises_the_whole_row(stack, lm, pair):
    source, target = pair
    dec, cross = blocks(lm, source, target)
    # queries 3..5 of head 1 in layer 0, and the two neighbouring keys of the block looked at that hold the most of
    # their weight
    mass = (dec if stack == "decoder" else cross)[0][1][3:6].sum(0)
    k0 = int((mass[:-1] + mass[1:]).argmax())
    kdec, kcross = blocks(lm, source, target, stack, AttentionOptions(knockout=((0, 1, 3, 6, k0, k0 + 2),)))
    row = torch.cat([dec[0][1], cross[0][1]], dim=-1)  # (T, T + S): the merged rows of head 1
    off = 0 if stack == "decoder" else len(target)
    row[3:6, off + k0 : off + k0 + 2] = 0
    row = row / row.sum(-1, keepdim=True)
    torch.testing.assert_close(kdec[0][1], row[:, : len(target)], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(kcross[0][1], row[:, len(target) :], atol=1e-5, rtol=1e-4)
    # the cut cells held weight and hold none now (the whole row's renormalisation is held exactly above; the
    # other block's change may be below float32's resolution where this random model's rows are peaked)
    knocked, before = (kdec, dec) if stack == "decoder" else (kcross, cross)
    assert torch.all(knocked[0][1][3:6, k0 : k0 + 2] == 0) and before[0][1][3:6, k0 : k0 + 2].sum() > 0


def test_traced_blocks_equal_the_bound_passes(lm, pair):
    """The blocks recorded beside one pass are those each stack's own pass records (what the routes run)."""
    source, target = pair
    dec, cross = blocks(lm, source, target)
    for stack, expected in (("decoder", dec), ("cross", cross)):
        trace: list = []
        bound = lm.backend.with_target(source, target, stack)
        bound.hidden(bound.ids, AttentionOptions(), trace)
        for t, e in zip(trace, expected, strict=True):
            torch.testing.assert_close(t.pattern[0], e, atol=0, rtol=0)


def test_generation_rows_are_the_teacher_forced_rows(lm, pair):
    source, _ = pair
    written = lm.backend.write(source, max_new_tokens=4)
    dec, cross = blocks(lm, source, written)
    state = lm.backend.start_generation()
    for t in range(1, len(written)):
        ids = written[:t] if t == 1 else written[t - 1 : t]
        _, rows, cross_rows = lm.backend.step_pair(source, ids, state, AttentionOptions())
        for layer, (r, c) in enumerate(zip(rows, cross_rows, strict=True)):
            torch.testing.assert_close(r[:, :t], dec[layer][:, t - 1, :t], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(c, cross[layer][:, t - 1], atol=1e-5, rtol=1e-4)
