"""QK attribution on encoders (BERT and its post-norm kin: model/causal/stacks.py's encoder stack, split by
model/causal/seq2seq.py ``qk_pair``), and the encoders it refuses saying why.

Oracle: transformers' eager masked LM loaded apart from attnscope's, its q and k as each layer's query and
key linear modules project them (forward hooks): the raw score of a head is their product.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.causal import NotSplittable  # noqa: E402
from attnscope.model.causal.seq2seq import qk_pair  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from transformers import AutoModelForMaskedLM  # noqa: E402

from tests.kit.encoders import build_encoder  # noqa: E402

FAMILIES = ["bert", "roberta", "electra", "xlm-roberta", "distilbert"]
REFUSED = {"albert": "one module", "deberta-v2": "disentangled"}
TEXT = "The cat [MASK] on the mat, and the dog saw the cat."
CASES = [(0, 0, 1, 4), (1, 2, 5, 3), (1, 3, 0, 9), (0, 1, 7, 7)]  # (layer, head, query, key), keys on both sides


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("enc_qk")
    out = {}
    for family in [*FAMILIES, *REFUSED]:
        folder = build_encoder(family, root / family)
        lm = load_model(folder, device="cpu")
        ref = AutoModelForMaskedLM.from_pretrained(folder, attn_implementation="eager").eval()
        out[family] = (lm, ref, lm.tokenizer.encode_ids(TEXT))
    return out


def eager_qk(ref, ids, layer: int):
    """Eager's q and k (nh, T, hs) of ``layer``, as its query and key linear modules give them."""
    trunk = ref.base_model
    if hasattr(trunk, "transformer"):  # DistilBERT
        attn = trunk.transformer.layer[layer].attention
        q_proj, k_proj = attn.q_lin, attn.k_lin
    else:
        attn = trunk.encoder.layer[layer].attention.self
        q_proj, k_proj = attn.query, attn.key
    kept = {}
    hooks = [q_proj.register_forward_hook(lambda m, a, out: kept.__setitem__("q", out[0])),
             k_proj.register_forward_hook(lambda m, a, out: kept.__setitem__("k", out[0]))]
    try:
        with torch.no_grad():
            ref(torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    nh = ref.config.n_heads if hasattr(ref.config, "n_heads") else ref.config.num_attention_heads
    return (kept[n].view(kept[n].shape[0], nh, -1).transpose(0, 1) for n in ("q", "k"))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layer, head, query, key", CASES)
def test_the_terms_add_up_to_eagers_score(family, layer, head, query, key, models):
    lm, ref, ids = models[family]
    got = qk_pair(lm.backend, layer, head, query, key, ids)
    q, k = eager_qk(ref, ids, layer)
    raw = float(q[head, query].double() @ k[head, key].double())
    tol = 1e-4 * (1 + abs(raw))
    assert got.score == pytest.approx(raw, abs=tol)
    assert float(got.matrix.sum()) == pytest.approx(raw, abs=tol)
    nh = ref.config.n_heads if hasattr(ref.config, "n_heads") else ref.config.num_attention_heads
    n_terms = 1 + layer * (nh + 1) + 1  # embed, each earlier head and MLP, bias
    assert got.matrix.shape == (n_terms, n_terms) and got.key_components is None
    assert got.components[0] == "embed" and got.components[-1] == "bias"
    assert all(f"L{i}H{h}" in got.components for i in range(layer) for h in range(nh))
    assert "norms after each residual add" in got.frozen or layer == 0
    assert got.masked is False and got.attn_scores is not None  # an encoder's every key may be attended


@pytest.mark.parametrize("family", REFUSED)
def test_albert_and_deberta_are_refused_saying_why(family, models):
    lm, _, ids = models[family]
    with pytest.raises(NotSplittable, match=REFUSED[family]):
        qk_pair(lm.backend, 0, 0, 1, 2, ids)


def eager_rotated_qk(ref, ids, layer: int):
    """ModernBERT eager's q and k (nh, T, hs) of ``layer`` after RoPE, as its attention function receives them."""
    from transformers.models.modernbert import modeling_modernbert as mm

    kept, plain = {}, mm.eager_attention_forward

    def keep(module, query, key, *args, **kwargs):
        if module.layer_idx == layer:
            kept["q"], kept["k"] = query[0], key[0]
        return plain(module, query, key, *args, **kwargs)

    mm.eager_attention_forward = keep
    try:
        with torch.no_grad():
            ref(torch.tensor([ids]))
    finally:
        mm.eager_attention_forward = plain
    return kept["q"], kept["k"]


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory):
    folder = build_encoder("modernbert", tmp_path_factory.mktemp("enc_qk_modernbert") / "modernbert")
    lm = load_model(folder, device="cpu")
    ref = AutoModelForMaskedLM.from_pretrained(folder, attn_implementation="eager").eval()
    return lm, ref, lm.tokenizer.encode_ids(TEXT)


# layer 0 global (no norm before its attention), layers 1 and 2 a band of ±2: key 9 from query 0 is masked there
@pytest.mark.parametrize("layer, head, query, key", [(0, 1, 2, 8), (1, 0, 4, 3), (2, 1, 6, 7), (2, 0, 0, 9)])
def test_modernbert_terms_add_up_to_eagers_rotated_score(layer, head, query, key, modernbert):
    lm, ref, ids = modernbert
    got = qk_pair(lm.backend, layer, head, query, key, ids)
    q, k = eager_rotated_qk(ref, ids, layer)
    raw = float(q[head, query].double() @ k[head, key].double())
    tol = 1e-4 * (1 + abs(raw))
    assert got.score == pytest.approx(raw, abs=tol)
    assert float(got.matrix.sum()) == pytest.approx(raw, abs=tol)
    assert got.components[0] == "embed" and got.components[-1] == "bias" and len(got.components) == 2 + layer * 5
    assert got.masked == (abs(query - key) > 2 and layer > 0)
    assert (got.attn_scores is None) == got.masked
    assert ("input norm" in got.frozen) == (layer > 0)
