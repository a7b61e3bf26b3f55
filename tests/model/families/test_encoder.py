"""Encoders opened from their folders (model/families/encoder.py): the tokenizer's own special tokens,
every layer's pattern equal to transformers eager, the masked-LM head's logits at every position,
ModernBERT's band, and what is refused."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.families.encoder import check_encoder  # noqa: E402
from attnscope.model.options import AttentionOptions  # noqa: E402
from attnscope.model.ours.checkpoint import CheckpointError  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from transformers import AutoModelForMaskedLM, AutoTokenizer  # noqa: E402

from tests.kit.encoders import ENCODERS, build_encoder, model_type  # noqa: E402

TEXT = "The cat [MASK] on the mat. Then the dog saw the cat 🎉, and the [MASK] sat on the log."


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    root = tmp_path_factory.mktemp("encoders")
    return {f: build_encoder(f, root / f.replace(" ", "_")) for f in ENCODERS}


@pytest.fixture(scope="module")
def loaded(encoders):
    return {f: load_model(encoders[f], device="cpu") for f in ENCODERS}


def eager(folder, ids):
    ref = AutoModelForMaskedLM.from_pretrained(folder, attn_implementation="eager")
    with torch.no_grad():
        return ref(torch.tensor([ids]), output_attentions=True)


@pytest.mark.parametrize("family", list(ENCODERS))
def test_ids_are_the_tokenizers_own_with_its_special_tokens(family, encoders, loaded):
    tok = loaded[family].tokenizer
    enc = tok.encode(TEXT)
    reference = AutoTokenizer.from_pretrained(encoders[family])
    typed = TEXT.replace("[MASK]", reference.mask_token)  # "[MASK]" typed is the tokenizer's mask token
    assert enc.ids == reference(typed)["input_ids"]
    assert enc.ids[0] == reference.cls_token_id and enc.ids[-1] == reference.sep_token_id
    assert enc.ids.count(reference.mask_token_id) == TEXT.count("[MASK]")
    # the spans tile the text as typed; the special tokens the tokenizer added cover none of it
    assert "".join(TEXT[a:b] for a, b in enc.offsets) == TEXT
    assert enc.offsets[0][0] == enc.offsets[0][1] and enc.offsets[-1][0] == enc.offsets[-1][1]
    for i, token_id in enumerate(enc.ids):
        if token_id == reference.mask_token_id:
            a, b = enc.offsets[i]
            assert "MASK" in TEXT[a:b] or TEXT[a:b].strip() == ""


@pytest.mark.parametrize("family", list(ENCODERS))
def test_every_layer_equals_eager_and_the_head_its_logits(family, encoders, loaded):
    lm = loaded[family]
    facts = lm.facts
    assert facts.architecture == "encoder" and facts.family == model_type(family)
    assert facts.stacks == [
        {"name": "encoder", "n_layer": facts.n_layer, "n_head": facts.n_head, "query": "source", "key": "source"}
    ]
    ids = lm.tokenizer.encode_ids(TEXT)
    trace = []
    lm.backend.run(ids, AttentionOptions(), trace, logits=False)
    out = eager(encoders[family], ids)
    assert [t.layer for t in trace] == list(range(facts.n_layer)) == facts.attention_layers
    for t, expected in zip(trace, out.attentions, strict=True):
        torch.testing.assert_close(t.pattern[0], expected[0], atol=1e-5, rtol=0)
        assert t.pattern.max() > 0.5  # far from uniform: the test tells heads apart
    hidden = lm.backend.hidden(ids, AttentionOptions(), [])
    with torch.inference_mode():
        logits = lm.backend.head(hidden)  # the masked-LM head at every position: the guesses at it
    torch.testing.assert_close(logits, out.logits[0], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("family", list(ENCODERS))
def test_every_row_sees_every_key_whatever_causal_says(family, loaded):
    lm = loaded[family]
    ids = lm.tokenizer.encode_ids(TEXT)
    plain, opened = [], []
    lm.backend.run(ids, AttentionOptions(), plain, logits=False)
    lm.backend.run(ids, AttentionOptions(causal=False), opened, logits=False)  # a decoder's what-if: no change here
    layers = lm.facts.layers
    for t, o in zip(plain, opened, strict=True):
        assert torch.equal(t.pattern, o.pattern) and torch.equal(t.mask, o.mask)
        if layers[t.layer]["type"] == "full":
            assert t.mask.all()
            assert (t.pattern[0].triu(1) > 0).any()  # later keys have weight: no causal triangle


def test_modernbert_local_layers_are_a_band(loaded):
    lm = loaded["modernbert"]
    ids = lm.tokenizer.encode_ids(TEXT)
    trace = []
    lm.backend.run(ids, AttentionOptions(), trace, logits=False)
    T = len(ids)
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs()
    kinds = [layer["type"] for layer in lm.facts.layers]
    assert kinds == ["full", "sliding", "sliding"]
    for t in trace:
        about = lm.facts.layers[t.layer]
        mask = t.mask if t.mask.dim() == 2 else t.mask[0]
        if about["type"] == "sliding":
            assert torch.equal(mask.cpu(), distance <= about["window"])  # ±window on both sides
            assert (t.pattern[0][:, distance > about["window"]] == 0).all()
        else:
            assert mask.all()


@pytest.mark.parametrize("family", ["deberta-v2", "deberta-v2 (v2)"])
def test_deberta_parts_add_up_to_the_raw_scores(family, loaded):
    lm = loaded[family]
    facts = lm.facts
    hd = facts.head_dim
    assert facts.score_parts and facts.positions == "relative"
    assert facts.divisor == pytest.approx((3 * hd) ** 0.5) and facts.divisor_rule == "sqrt(3 * head_dim)"
    trace = []
    lm.backend.run(lm.tokenizer.encode_ids(TEXT), AttentionOptions(), trace, logits=False)
    for t in trace:
        parts = [
            t.fields[n] for n in ("attn_scores_content", "attn_scores_content_position", "attn_scores_position_content")
        ]
        torch.testing.assert_close(sum(parts), t.attn_scores_raw, atol=1e-5, rtol=1e-6)
        torch.testing.assert_close(t.attn_scores_content, t.q @ t.k.transpose(-1, -2), atol=1e-5, rtol=1e-6)
        for part in parts[1:]:
            assert part.abs().max() > 0.1  # each position term counts
        torch.testing.assert_close(t.attn_scores, t.attn_scores_raw / t.divisor, atol=1e-5, rtol=1e-5)


def test_deberta_v1_is_refused_in_one_line(tmp_path):
    with pytest.raises(CheckpointError) as e:
        check_encoder({"model_type": "deberta"}, tmp_path)
    assert "DeBERTa" in str(e.value) and "\n" not in str(e.value)


def test_the_atlas_of_an_encoder_says_its_architecture_and_stack(encoders, tmp_path):
    import json

    import attnscope

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The cat sat on the mat. The dog sat on the log.\nShe told her brother about the train.\n")
    out = attnscope.atlas(str(corpus), str(tmp_path / "atlas"), checkpoint=encoders["bert"], device="cpu")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["model"]["architecture"] == "encoder" and meta["model"]["stack"] == "encoder"
