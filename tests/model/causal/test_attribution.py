"""Direct logit attribution and the residual-stream split, with transformers and hooks as the oracle.

Each head's part is recomputed from transformers' own eager run
(:func:`tests.kit.decompositions.expected_attribution`): its slice of the output projection's input through
the projection module, through Gemma 2's post-attention norm and the final norm at the scales
they have on the text (written out there), dotted with the LM head's row. The parts must add up to the
logit transformers computes (Gemma 2: before its final softcap, which maps it to transformers').
"""

from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.causal import NotSplittable  # noqa: E402
from attnscope.model.causal.attribution import attribute  # noqa: E402
from attnscope.model.families.backend import load_transformers_dir  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.decompositions import (  # noqa: E402
    FAMILIES,
    TEXT,
    expected_attribution,
    run,
)
from tests.kit.family import build  # noqa: E402

NAMES = ["gpt2-export", *FAMILIES]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("where", ["last", "middle"])
def test_each_part_is_its_write_through_the_frozen_final_norm(name, where, loaded, oracles):
    backend = loaded[name].backend
    ids = backend.tokenizer.encode_ids(TEXT)
    position = len(ids) - 1 if where == "last" else len(ids) // 2
    got = attribute(backend, ids, position)
    heads, mlps, embed, logit = expected_attribution(oracles[name], ids, position, got.token_id)
    scale = 1.0 + got.heads.abs().max().item()
    assert (got.heads - heads).abs().max() <= 1e-4 * scale
    assert (got.mlps - mlps).abs().max() <= 1e-4 * scale
    assert abs(got.embed - embed) <= 1e-4 * scale
    cap = got.final_softcap
    assert (cap is not None) == (name == "gemma2")
    # the parts add up to the logit, and that logit is transformers' (before the final softcap)
    total = got.heads.sum().item() + got.mlps.sum().item() + got.embed + got.rest
    assert total == pytest.approx(got.logit, abs=1e-4 * (1.0 + abs(got.logit)))
    shown = got.logit if cap is None else cap * torch.tanh(torch.tensor(got.logit / cap)).item()
    assert shown == pytest.approx(float(logit), abs=1e-4 * (1.0 + abs(shown)))


@pytest.mark.parametrize("name", NAMES)
def test_the_default_token_is_the_top_guess_and_any_token_adds_up(name, loaded, oracles):
    backend = loaded[name].backend
    ids = backend.tokenizer.encode_ids(TEXT)
    _, logits, _ = run(oracles[name], ids)
    top = attribute(backend, ids, 5)
    assert top.token_id == int(logits[5].argmax())
    other = attribute(backend, ids, 5, token_id=7)
    total = other.heads.sum().item() + other.mlps.sum().item() + other.embed + other.rest
    assert total == pytest.approx(other.logit, abs=1e-4 * (1.0 + abs(other.logit)))
    assert "frozen" in other.frozen and "final norm" in other.frozen


def test_our_gpt_and_the_transformers_backend_answer_alike(family_dirs, loaded):
    ours = loaded["gpt2-export"].backend
    theirs = load_transformers_dir(family_dirs["gpt2-export"], torch.device("cpu"))
    ids = ours.tokenizer.encode_ids(TEXT)
    a, b = attribute(ours, ids, len(ids) - 1), attribute(theirs, ids, len(ids) - 1)
    assert a.token_id == b.token_id
    assert (a.heads - b.heads).abs().max() <= 1e-4
    assert (a.mlps - b.mlps).abs().max() <= 1e-4
    assert a.rest == pytest.approx(b.rest, abs=1e-4)


@pytest.mark.parametrize(
    "family, names",
    [("diffllama", "differential attention"), ("qwen3_next", "layer 0 (gated_deltanet)"), ("deepseek_v3", "latent")],
)
def test_what_cannot_be_split_is_refused_by_name(family, names, tmp_path):
    backend = load_model(build(family, tmp_path / family), "cpu").backend
    ids = backend.tokenizer.encode_ids(TEXT)
    with pytest.raises(NotSplittable, match=re.escape(names)):
        attribute(backend, ids, 3)


def test_concurrent_forward_passes_leave_an_attribution_alone(loaded):
    """A server computes several requests at once on one model: other texts' forward passes running
    beside an attribution must not reach its hooks (they did: the page drew another pass's layers)."""
    import threading

    from attnscope.model.options import AttentionOptions

    backend = loaded["llama"].backend
    ids = backend.tokenizer.encode_ids(TEXT)
    alone = attribute(backend, ids, len(ids) - 1)
    other = backend.tokenizer.encode_ids("A completely different sentence, longer than the first one by far.")
    stop = threading.Event()

    def noise():
        while not stop.is_set():
            backend.run(other, AttentionOptions(causal=False), [], logits=False)

    threads = [threading.Thread(target=noise) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(8):
            beside = attribute(backend, ids, len(ids) - 1)
            assert torch.equal(beside.heads, alone.heads) and torch.equal(beside.mlps, alone.mlps)
    finally:
        stop.set()
        for t in threads:
            t.join()
