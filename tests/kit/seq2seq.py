"""Tiny random-weight encoder-decoders (T5, BART), written to disk the way a user's download is.

Each is built from a transformers config in the test (no download), its query and key weights scaled
up so patterns are far from uniform, with a tokenizer trained here in the family's own kind: Unigram
(SentencePiece-style) for T5, its source ending in ``</s>``; byte-level BPE for BART, its source
``<s> … </s>``; saved with ``PreTrainedTokenizerFast`` so that ``AutoTokenizer`` reads the same files
attnscope reads.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.kit.family import QK_GAIN, SP_TEXT

T5_SPECIALS = {"pad": "<pad>", "eos": "</s>", "unk": "<unk>"}
BART_SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>", "mask": "<mask>"}
QK_NAMES = ("q.weight", "k.weight", "q_proj.weight", "k_proj.weight")  # T5's q, k; BART's q_proj, k_proj

# family -> (tokenizer kind, special tokens, config kwargs)
SEQ2SEQ: dict[str, tuple[str, dict, dict]] = {
    "t5": (
        "unigram",
        T5_SPECIALS,
        dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
             relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0),
    ),
    "bart": (
        "bpe",
        BART_SPECIALS,
        dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128, decoder_start_token_id=2,
             forced_eos_token_id=None),
    ),
}


def tokenizer(kind: str, specials: dict[str, str]):
    """A ``tokenizers.Tokenizer`` of ``kind`` trained on the test texts: Unigram ending a text in ``</s>``,
    or byte-level BPE wrapping it in ``<s> … </s>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    order = list(specials.values())
    if kind == "bpe":
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=400, special_tokens=order, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    else:
        tk = Tokenizer(models.Unigram())
        tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.UnigramTrainer(
            vocab_size=250, special_tokens=order, unk_token=specials["unk"], show_progress=False
        )
    tk.train_from_iterator(SP_TEXT, trainer=trainer)
    eos = specials["eos"]
    if "bos" in specials:
        bos = specials["bos"]
        single, tokens = f"{bos} $A {eos}", [(bos, tk.token_to_id(bos)), (eos, tk.token_to_id(eos))]
    else:
        single, tokens = f"$A {eos}", [(eos, tk.token_to_id(eos))]
    tk.post_processor = processors.TemplateProcessing(single=single, special_tokens=tokens)
    return tk


def build_seq2seq(family: str, out: Path, seed: int = 0) -> Path:
    """Write a tiny random ``family`` encoder-decoder and its tokenizer to ``out``; returns ``out``."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, PreTrainedTokenizerFast

    kind, specials, extra = SEQ2SEQ[family]
    tk = tokenizer(kind, specials)
    out.mkdir(parents=True, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tk, **{f"{k}_token": v for k, v in specials.items()}).save_pretrained(out)
    ids = {f"{k}_token_id": tk.token_to_id(v) for k, v in specials.items() if k in ("pad", "bos", "eos")}
    config = AutoConfig.for_model(family, vocab_size=tk.get_vocab_size(), **ids, **extra)
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(QK_NAMES):
                p.mul_(QK_GAIN if family == "bart" else QK_GAIN / 4)  # T5's own init is √d_k larger already
    model.save_pretrained(out)
    return out
