"""Direct attribution and QK attribution on encoder-decoders (model/causal/seq2seq.py, over stacks.py).

Oracles: transformers' eager model loaded apart from attnscope's, its decoder's logits (the parts of the
split add up to them), and its q and k as each attention module projects them (forward hooks on the
projections: the raw score of a head is their product), with T5's relative position bias as the module
returns it; ``raw · scaling + bias`` is the score eager's softmax sees.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.causal.seq2seq import attribute_pair, qk_pair  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from transformers import AutoModelForSeq2SeqLM  # noqa: E402

from tests.kit.seq2seq import build_seq2seq  # noqa: E402

FAMILIES = ["t5", "bart"]
SOURCE = "The cat sat on the mat. Then the dog saw the cat."
TARGET = "A dog sat on the log."
# (stack, layer, head, query, key): a later key of the decoder's is masked, its raw score still split
CASES = [("encoder", 1, 2, 5, 3), ("encoder", 0, 0, 0, 9), ("decoder", 1, 1, 4, 2), ("decoder", 0, 3, 2, 5),
         ("cross", 1, 3, 4, 6), ("cross", 0, 0, 0, 2)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("s2s_causal")
    out = {}
    for family in FAMILIES:
        folder = build_seq2seq(family, root / family)
        lm = load_model(folder, device="cpu")
        ref = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
        source = lm.tokenizer.encode_ids(SOURCE)
        target, _ = lm.backend.read_target(TARGET)
        out[family] = (lm, ref, source, target)
    return out


def attention_module(ref, stack: str, layer: int) -> torch.nn.Module:
    trunk = ref.get_encoder() if stack == "encoder" else ref.get_decoder()
    if hasattr(trunk, "block"):  # T5
        part = trunk.block[layer].layer[1 if stack == "cross" else 0]
        return part.EncDecAttention if stack == "cross" else part.SelfAttention
    block = trunk.layers[layer]
    return block.encoder_attn if stack == "cross" else block.self_attn


def eager_scores(ref, source, target, stack: str, layer: int):
    """Eager's q (nh, T, hs) and k (nh, S, hs) of the layer's attention, and the bias it adds (or None)."""
    module = attention_module(ref, stack, layer)
    q_proj, k_proj = (module.q, module.k) if hasattr(module, "q") else (module.q_proj, module.k_proj)
    kept = {}
    hooks = [
        q_proj.register_forward_hook(lambda m, a, out: kept.__setitem__("q", out[0])),
        k_proj.register_forward_hook(lambda m, a, out: kept.__setitem__("k", out[0])),
        module.register_forward_hook(lambda m, a, out: kept.__setitem__("bias", out[1] if len(out) == 3 else None)),
    ]
    try:
        with torch.no_grad():
            ref(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target]))
    finally:
        for h in hooks:
            h.remove()
    nh = module.n_heads if hasattr(module, "n_heads") else module.num_heads
    q, k = (kept[n].view(kept[n].shape[0], nh, -1).transpose(0, 1) for n in ("q", "k"))
    return q, k, kept["bias"], float(module.scaling)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("position, token_id", [(-1, None), (2, 5), (0, 7), (5, None)])
def test_the_parts_add_up_to_eagers_logit(family, position, token_id, models):
    lm, ref, source, target = models[family]
    position = position % len(target)
    got = attribute_pair(lm.backend.with_target(source, target, "decoder"), position, token_id)
    with torch.no_grad():
        logits = ref(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target])).logits[0]
    if token_id is None:
        assert got.token_id == int(logits[position].argmax())
    want = float(logits[position, got.token_id])
    total = float(got.heads.sum() + got.cross_heads.sum() + got.mlps.sum()) + got.embed + got.rest
    assert total == pytest.approx(want, abs=1e-4 * (1 + abs(want)))
    assert got.logit == pytest.approx(want, abs=1e-4 * (1 + abs(want)))
    n_layer, n_head = len(decoder_layers(ref)), 4
    assert got.heads.shape == got.cross_heads.shape == (n_layer, n_head) and got.mlps.shape == (n_layer,)
    assert float(got.cross_heads.abs().sum()) > 0 and got.mixers == [None] * n_layer
    assert "frozen" in got.frozen


def decoder_layers(ref) -> list:
    trunk = ref.get_decoder()
    return list(trunk.block if hasattr(trunk, "block") else trunk.layers)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stack, layer, head, query, key", CASES)
def test_the_terms_add_up_to_eagers_score(family, stack, layer, head, query, key, models):
    lm, ref, source, target = models[family]
    got = qk_pair(lm.backend.with_target(source, target, stack), layer, head, query, key)
    q, k, bias, scaling = eager_scores(ref, source, target, stack, layer)
    raw = float(q[head, query].double() @ k[head, key].double())
    tol = 1e-4 * (1 + abs(raw))
    assert got.score == pytest.approx(raw, abs=tol)
    assert float(got.matrix.sum()) == pytest.approx(raw, abs=tol)
    assert got.components[0] == "embed" and got.components[-1] == "bias"
    if stack == "cross":  # the keys' terms are the encoder's, through its final norm
        assert got.key_components[0] == "enc.embed" and got.key_components[-1] == "enc.bias"
        assert got.matrix.shape == (len(got.components), len(got.key_components))
        assert any(n.startswith(f"L{layer}H") for n in got.components)  # the same layer's self heads come first
    else:
        assert got.key_components is None and got.matrix.shape == (len(got.components),) * 2
    if family == "t5" and stack != "cross":  # a term of its own, added after q·kᵀ (T5's divisor is 1)
        assert got.position_bias == pytest.approx(float(bias[0, head, query, key]), abs=1e-6)
    else:
        assert got.position_bias is None
    assert got.masked == (stack == "decoder" and key > query)
    if got.masked:
        assert got.attn_scores is None
    else:
        sees = raw * scaling + (got.position_bias or 0.0)
        assert got.attn_scores == pytest.approx(sees, abs=tol)


@pytest.mark.parametrize("family", ["mt5", "umt5", "mbart", "marian", "pegasus", "t5gemma"])
def test_the_other_families_split_exactly(family, tmp_path):
    """The layouts of mT5 and UMT5 (a bias in every layer), mBART and Pegasus (norms before each sublayer, a
    final norm), Marian (norms after each add) and T5Gemma (normed writes, RoPE, grouped keys, softcaps): the
    parts add up to eager's logit (T5Gemma's shown capped), and a head's terms to its score in every stack."""
    from tests.kit.seq2seq import SEQ2SEQ

    assert family in SEQ2SEQ
    folder = build_seq2seq(family, tmp_path / family)
    lm = load_model(folder, device="cpu")
    ref = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    source = lm.tokenizer.encode_ids(SOURCE)
    target, _ = lm.backend.read_target(TARGET)
    with torch.no_grad():
        logits = ref(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target])).logits[0]
    got = attribute_pair(lm.backend.with_target(source, target, "decoder"), 3, None)
    total = float(got.heads.sum() + got.cross_heads.sum() + got.mlps.sum()) + got.embed + got.rest
    cap = got.final_softcap
    shown = total if cap is None else cap * float(torch.tanh(torch.tensor(total / cap)))
    assert shown == pytest.approx(float(logits[3, got.token_id]), abs=1e-4 * (1 + abs(shown)))
    assert got.token_id == int(logits[3].argmax())
    for stack, layer, head, query, key in CASES[::2]:
        qk = qk_pair(lm.backend.with_target(source, target, stack), layer, head, query, key)
        assert float(qk.matrix.sum()) == pytest.approx(qk.score, abs=1e-4 * (1 + abs(qk.score)))
        assert (qk.position_bias is not None) == (family.endswith("t5") and stack != "cross")
