"""Encoder-decoders opened from their folders (model/families/seq2seq.py): each of the three stacks'
patterns equal to transformers eager on the same source and target, the decoder's logits, the target
the model writes equal to ``generate()``'s, T5's divisor 1, and what is refused."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.families.seq2seq import STACKS  # noqa: E402
from attnscope.model.options import AttentionOptions  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer  # noqa: E402

from tests.kit.seq2seq import SEQ2SEQ, build_seq2seq, model_type  # noqa: E402

SOURCE = "The cat sat on the mat. Then the dog saw the cat."
TARGET = "A dog sat on the log."
EAGER = {"encoder": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("seq2seq")
    return {f: build_seq2seq(f, root / f) for f in SEQ2SEQ}


@pytest.fixture(scope="module")
def loaded(folders):
    return {f: load_model(folders[f], device="cpu") for f in SEQ2SEQ}


def eager(folder):
    return AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()


@pytest.mark.parametrize("family", list(SEQ2SEQ))
def test_every_stack_equals_eager_and_the_head_its_logits(family, folders, loaded):
    lm = loaded[family]
    facts, backend = lm.facts, lm.backend
    assert facts.architecture == "encoder-decoder" and facts.family == model_type(family)
    assert [(s["name"], s["query"], s["key"]) for s in facts.stacks] == [
        ("encoder", "source", "source"), ("decoder", "target", "target"), ("cross", "target", "source")
    ]
    source = lm.tokenizer.encode_ids(SOURCE)
    assert source == AutoTokenizer.from_pretrained(folders[family])(SOURCE)["input_ids"]  # its own special tokens
    target, _ = backend.read_target(TARGET)
    assert target[0] == lm.backend.model.config.decoder_start_token_id and len(target) > 3
    with torch.no_grad():
        out = eager(folders[family])(
            input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target]), output_attentions=True
        )
    for stack in STACKS:
        bound = backend.with_target(source, target, stack)
        assert bound.ids == (source if stack == "encoder" else target)
        trace: list = []
        hidden = bound.hidden(bound.ids, AttentionOptions(), trace)
        expected = getattr(out, EAGER[stack])
        assert [t.layer for t in trace] == list(range(len(expected)))
        for t, e in zip(trace, expected, strict=True):
            torch.testing.assert_close(t.pattern[0], e[0], atol=1e-5, rtol=0)
            T, S = e.shape[-2:]
            assert t.pattern.max() > 4 / S  # far from uniform (1 / S): the test tells heads apart
            assert t.mask.shape == (T, S)
            if stack == "decoder":  # causal over the target (T5Gemma's sliding layers: a band of it)
                assert not t.mask.triu(1).any() and bool(t.mask.diagonal().all())
            elif stack == "encoder":  # both ways (T5Gemma's sliding layers: a band on both sides)
                assert bool(t.mask.diagonal().all()) and bool(t.mask.triu(1).any())
                # T5Gemma 2's band: (w + 1) // 2 keys up to itself, w // 2 after it, uneven for an even window
                assert torch.equal(t.mask, t.mask.T) or family == "t5gemma2"
            else:  # every source token
                assert bool(t.mask.all())
        with torch.inference_mode():
            torch.testing.assert_close(backend.head(hidden), out.logits[0], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("family", list(SEQ2SEQ))
def test_the_written_target_is_generates(family, folders, loaded):
    lm = loaded[family]
    source = lm.tokenizer.encode_ids(SOURCE)
    for n in (1, 6):
        written = lm.backend.write(source, max_new_tokens=n)
        with torch.no_grad():
            expected = eager(folders[family]).generate(torch.tensor([source]), do_sample=False, max_new_tokens=n)
        assert written == expected[0].tolist()
        assert written[0] == lm.backend.model.config.decoder_start_token_id and 1 < len(written) <= n + 1


def test_t5_divides_by_one_and_bart_by_the_root_of_head_dim(loaded):
    t5, bart = loaded["t5"].facts, loaded["bart"].facts
    assert t5.divisor == 1.0 and set(t5.layer_divisors) == {1.0}
    assert bart.divisor == pytest.approx(bart.head_dim**0.5) and bart.divisor_rule == "sqrt(head_dim)"
    source = loaded["t5"].tokenizer.encode_ids(SOURCE)
    target, _ = loaded["t5"].backend.read_target(TARGET)
    for stack in STACKS:
        trace: list = []
        bound = loaded["t5"].backend.with_target(source, target, stack)
        bound.hidden(bound.ids, AttentionOptions(), trace)
        assert {t.divisor for t in trace} == {1.0}


def test_a_divisor_applies_to_the_stack_looked_at(loaded):
    lm = loaded["bart"]
    source = lm.tokenizer.encode_ids(SOURCE)
    target, _ = lm.backend.read_target(TARGET)
    for stack in STACKS:
        plain = _patterns(lm, source, target, stack, AttentionOptions())
        halved = _patterns(lm, source, target, stack, AttentionOptions(divisor=2 * lm.facts.divisor))
        assert not torch.allclose(halved[0], plain[0])
        assert {float(t.divisor) for t in _traces(lm, source, target, stack, AttentionOptions(divisor=3.0))} == {3.0}


def _traces(lm, source, target, stack, opts):
    trace: list = []
    bound = lm.backend.with_target(source, target, stack)
    bound.hidden(bound.ids, opts, trace)
    return trace


def _patterns(lm, source, target, stack, opts):
    return [t.pattern for t in _traces(lm, source, target, stack, opts)]


@pytest.mark.parametrize("stack", ["decoder", "cross"])
def test_knocked_out_edges_leave_the_stack_looked_at(stack, loaded):
    """Edges knocked out in a stack's first layer: its pattern there is the plain one with those weights
    taken out and each row renormalised (that layer's inputs are unchanged: nothing before it is knocked)."""
    lm = loaded["bart"]
    source = lm.tokenizer.encode_ids(SOURCE)
    target, _ = lm.backend.read_target(TARGET)
    plain = _patterns(lm, source, target, stack, AttentionOptions())[0][0]  # (nh, T, S)
    edge = (0, 1, 2, 5, 0, 2)  # layer 0, head 1, queries 2..4, keys 0..1
    knocked = _patterns(lm, source, target, stack, AttentionOptions(knockout=(edge,)))[0][0]
    expected = plain.clone()
    expected[1, 2:5, 0:2] = 0
    expected[1] = expected[1] / expected[1].sum(-1, keepdim=True)
    torch.testing.assert_close(knocked, expected, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(knocked[1], plain[1])
