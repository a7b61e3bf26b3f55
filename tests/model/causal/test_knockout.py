"""Attention knockout against transformers' eager attention with those cells of the mask set to -inf
(an attention function registered for the oracle that wraps the family's own ``eager_attention_forward``)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.causal.knockout import knockout  # noqa: E402
from attnscope.model.options import AttentionOptions, NoKeyLeft  # noqa: E402

from tests.kit.interventions import (  # noqa: E402, F401
    FAMILIES,
    TEXT,
    family_dirs,
    knock_oracles,
    knocked_out,
    oracle_logits,
)

# a cell of one head (Llama: head 1 shares its key/value head with head 0), a range of queries over
# every head of layer 0, a cell in the last layer: all inside the sliding windows (Gemma 2: 6, gpt-oss: 4)
EDGES = [(1, 1, 20, 21, 18, 19), (0, None, 10, 14, 9, 11), (-1, 2, 23, 24, 22, 23)]


def edges_of(lm):
    last = lm.facts.n_layer - 1
    return [(last if e[0] == -1 else e[0], *e[1:]) for e in EDGES]


@pytest.mark.parametrize("name", FAMILIES)
def test_knockout_equals_eager_with_those_cells_masked(name, loaded, knock_oracles):  # noqa: F811
    lm, model = loaded[name], knock_oracles[name]
    ids = lm.tokenizer.encode_ids(TEXT)
    edges = edges_of(lm)
    with knocked_out(edges):
        ref = oracle_logits(model, ids)  # (T, V)
    clean = oracle_logits(model, ids)
    assert (ref - clean).abs().max() > 1e-3  # the edges mattered
    explicit = lm.backend.run(ids, AttentionOptions(knockout=tuple(edges)), [], logits=True)  # the named steps
    assert (explicit - ref).abs().max() <= 1e-4
    position = len(ids) - 1
    got = knockout(lm.backend, ids, edges, position, token_id=7)  # the fused kernel where the family has one
    with torch.inference_mode():
        assert (lm.backend.head(got.hidden) - ref).abs().max() <= 1e-4
    assert abs(got.logprob_after - float(torch.log_softmax(ref[position].double(), -1)[7])) <= 1e-4
    assert abs(got.logprob_before - float(torch.log_softmax(clean[position].double(), -1)[7])) <= 1e-4


@pytest.mark.parametrize("name", FAMILIES)
def test_the_traced_pattern_renormalises_over_the_keys_left(name, loaded):  # noqa: F811
    lm = loaded[name]
    ids = lm.tokenizer.encode_ids(TEXT)
    traces = []
    lm.backend.run(ids, AttentionOptions(knockout=((1, 1, 20, 21, 18, 19),)), traces, logits=False)
    pattern = traces[1].pattern[0]  # (nh, T, T)
    assert pattern[1, 20, 18] == 0 and pattern[0, 20, 18] > 0
    sink = traces[1].sink_mass
    total = pattern[1, 20].sum() + (0 if sink is None else sink[0, 1, 20])
    assert abs(float(total) - 1) <= 1e-5


@pytest.mark.parametrize("name", ["gpt2-export", "gemma2"])
def test_a_row_without_a_key_is_refused(name, loaded):  # noqa: F811
    lm = loaded[name]
    ids = lm.tokenizer.encode_ids(TEXT)
    window = lm.facts.sliding_window[0] or 21  # Gemma 2's layer 0 sees the query and the 5 keys before it
    with pytest.raises(NoKeyLeft) as e:
        knockout(lm.backend, ids, [(0, 3, 20, 21, 21 - window, 21)], 20)
    assert (e.value.layer, e.value.head, e.value.query) == (0, 3, 20)
    knockout(lm.backend, ids, [(0, 3, 20, 21, 22 - window, 21)], 20)  # one key left: fine
