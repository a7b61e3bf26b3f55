"""QK attribution: one head's raw score split into query-side × key-side terms.

Oracles: the score as transformers' eager attention multiplies q and k (kept by an attention
function that wraps eager, or GPT-2's fused projection), the score attnscope serves
(``attn_scores_raw`` of a traced run), and the embedding × embedding term written out by hand:
the embeddings through the layer's input norm at the scale the full residual stream sets, the q
and k rows of the projection, the q/k norm at the full head's scale (Qwen3), and RoPE at each
position (the rotation written out here, from the model's own cos and sin).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.causal import NotSplittable  # noqa: E402
from attnscope.model.causal.qk import qk_attribution  # noqa: E402
from attnscope.model.options import AttentionOptions  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.decompositions import (  # noqa: E402
    FAMILIES,
    TEXT,
    attention,
    blocks,
    norm_part,
    rms_frozen,
    run,
)
from tests.kit.family import build  # noqa: E402

NAMES = ["gpt2-export", *FAMILIES]
CASES = [(1, 1, 20, 9), (2, 3, 21, 4), (1, 0, 6, 6)]  # (layer, head, query, key); layer 2 = the last of a 3-layer model


def case(name: str, backend, layer: int, head: int):
    """The case on this model: its last layer where it has fewer, a head it has."""
    return min(layer, backend.facts.n_layer - 1), head % backend.facts.n_head


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("layer, head, query, key", CASES)
def test_the_terms_add_up_to_the_score_served_and_eager(name, layer, head, query, key, loaded, oracles):
    backend = loaded[name].backend
    layer, head = case(name, backend, layer, head)
    ids = backend.tokenizer.encode_ids(TEXT)
    got = qk_attribution(backend, ids, layer, head, query, key)
    n = len(got.components)
    assert got.matrix.shape == (n, n)
    assert got.components[0] == "embed" and got.components[-1] == "bias"
    assert n == 2 + layer * (backend.facts.n_head + 1)
    traces = []
    backend.run(ids, AttentionOptions(), traces, logits=False)
    served = float(traces[layer].attn_scores_raw[0, head, query, key])
    seen, _, _ = run(oracles[name], ids)
    q, k = seen["qk"][layer]
    kv = head // (q.shape[0] // k.shape[0])
    eager = float(q[head, query].double() @ k[kv, key].double())
    tol = 1e-4 * (1.0 + abs(eager))
    assert got.score == pytest.approx(served, abs=tol)
    assert got.masked == (not bool(traces[layer].mask[query, key]))
    assert float(got.matrix.sum()) == pytest.approx(eager, abs=tol)
    assert "frozen" in got.frozen and f"layer {layer}'s input norm" in got.frozen


def rotate(model, x: torch.Tensor, position: int, T: int) -> torch.Tensor:
    """RoPE at ``position`` written out: rotate-half (Llama, Qwen3, Gemma 2) or the halves of gpt-oss."""
    if model.config.model_type == "gpt2":
        return x
    hidden = torch.zeros(1, T, model.config.hidden_size)
    cos, sin = model.model.rotary_emb(hidden, position_ids=torch.arange(T)[None])
    cos, sin = cos[0, position].double(), sin[0, position].double()
    first, second = x.chunk(2, dim=-1)
    if model.config.model_type == "gpt_oss":
        return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


@torch.no_grad()
def by_hand(model, ids, layer: int, head: int, query: int, key: int) -> float:
    """The embedding × embedding term, from a hooked eager run and the weights."""
    seen, _, hidden = run(model, ids)
    block, attn = blocks(model)[layer], attention(blocks(model)[layer])
    norm_in = getattr(block, "input_layernorm", None) or block.ln_1
    nh = model.config.num_attention_heads
    n_kv = getattr(model.config, "num_key_value_heads", None) or nh
    kv = head // (nh // n_kv)
    sides = []
    for side, pos, h in (("q", query, head), ("k", key, kv)):
        y = norm_part(norm_in, hidden[layer][pos], hidden[0][pos])  # (C,)
        if hasattr(attn, "c_attn"):  # GPT-2: Conv1D (C, 3C), q then k then v
            C = y.shape[0]
            w = attn.c_attn.weight.double()[:, (0 if side == "q" else C) : (C if side == "q" else 2 * C)].T
        else:
            w = getattr(attn, f"{side}_proj").weight.double()
        hs = w.shape[0] // (nh if side == "q" else n_kv)
        x = w[h * hs : (h + 1) * hs] @ y  # (hs,)
        norm = getattr(attn, f"{side}_norm", None)
        if norm is not None:
            x = x * rms_frozen(norm, seen["qk_norm_in"][layer][side][pos, h])
        sides.append(rotate(model, x, pos, len(ids)))
    return float(sides[0] @ sides[1])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("layer, head, query, key", CASES[:2])
def test_the_embedding_term_equals_a_computation_by_hand(name, layer, head, query, key, loaded, oracles):
    backend = loaded[name].backend
    layer, head = case(name, backend, layer, head)
    ids = backend.tokenizer.encode_ids(TEXT)
    got = qk_attribution(backend, ids, layer, head, query, key)
    want = by_hand(oracles[name], ids, layer, head, query, key)
    assert float(got.matrix[0, 0]) == pytest.approx(want, abs=1e-4 * (1.0 + abs(want)))


def test_layer_zero_has_only_the_embeddings_and_the_biases(loaded):
    backend = loaded["llama"].backend
    ids = backend.tokenizer.encode_ids(TEXT)
    got = qk_attribution(backend, ids, 0, 2, 10, 3)
    assert got.components == ["embed", "bias"]
    assert float(got.matrix.sum()) == pytest.approx(got.score, abs=1e-4 * (1.0 + abs(got.score)))


def test_a_model_with_latent_attention_is_refused_by_name(tmp_path):
    backend = load_model(build("deepseek_v3", tmp_path / "mla"), "cpu").backend
    ids = backend.tokenizer.encode_ids(TEXT)
    with pytest.raises(NotSplittable, match="multi-head latent attention"):
        qk_attribution(backend, ids, 1, 0, 5, 2)
