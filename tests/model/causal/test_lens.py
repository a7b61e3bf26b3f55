"""The logit lens against transformers' own hidden states: the final norm and the LM head (with Gemma 2's final
softcap) applied to ``output_hidden_states``, the last entry the model's own logits."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.causal.lens import lens, residual_stream  # noqa: E402
from attnscope.model.options import AttentionOptions  # noqa: E402

from tests.kit.interventions import FAMILIES, TEXT, family_dirs, final_norm, oracles, unembed  # noqa: E402, F401

K = 5


@pytest.mark.parametrize("name", FAMILIES)
def test_lens_is_the_final_norm_and_unembedding_of_each_hidden_state(name, loaded, oracles):  # noqa: F811
    lm, model = loaded[name], oracles[name]
    ids = lm.tokenizer.encode_ids(TEXT)
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
        # transformers: the embeddings, each block's output, the last one after the final norm already
        ref = [unembed(model, final_norm(model)(h[0])) for h in out.hidden_states[:-1]] + [out.logits[0]]
    ref = torch.stack(ref).double()  # (L + 1, T, V)
    got = lens(lm.backend, ids, K)
    assert got.values.shape == (lm.facts.n_layer + 1, len(ids), K)
    top = torch.topk(ref, K, dim=-1)
    assert (got.values.double() - top.values).abs().max() <= 1e-4
    assert torch.equal(got.indices, top.indices)
    assert (got.lse - torch.logsumexp(ref, dim=-1)).abs().max() <= 1e-4
    assert not torch.equal(got.indices[0], got.indices[-1])  # the blocks changed the predictions


@pytest.mark.parametrize("name", ["gpt2-export", "gemma2"])
def test_the_residual_stream_is_what_each_block_hands_on(name, loaded, oracles):  # noqa: F811
    lm, model = loaded[name], oracles[name]
    ids = lm.tokenizer.encode_ids(TEXT)
    with torch.no_grad():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
    stream = residual_stream(lm.backend, ids, AttentionOptions())
    for i, h in enumerate(hidden[:-1]):
        assert (stream[i] - h[0]).abs().max() <= 1e-4
    assert (final_norm(model)(stream[-1]) - hidden[-1][0]).abs().max() <= 1e-4
