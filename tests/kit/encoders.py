"""Tiny random-weight encoders (BERT and its kin), written to disk the way a user's download is.

Each is built from a transformers config in the test (no download), its query and key weights scaled
up so patterns are far from uniform, with a tokenizer trained here in the family's own kind:
WordPiece (BERT, DistilBERT, ELECTRA), byte-level BPE (RoBERTa, ModernBERT), Unigram
(SentencePiece-style: ALBERT, XLM-R, DeBERTa-v3), each adding its own special tokens
(``[CLS] … [SEP]`` or ``<s> … </s>``) as the family's tokenizer does, and saved with
``PreTrainedTokenizerFast`` so that ``AutoTokenizer`` reads the same files attnscope reads.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.kit.family import QK_GAIN, SP_TEXT, unigram, wordpiece

BERT_SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
ROBERTA_SPECIALS = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}
# the query and key weights' names across the families (ModernBERT's fused Wqkv: its q and k rows)
QK_NAMES = (
    "self.query.weight",
    "self.key.weight",
    "attention.query.weight",
    "attention.key.weight",
    "q_lin.weight",
    "k_lin.weight",
    "query_proj.weight",
    "key_proj.weight",
)

# family -> (tokenizer kind, special tokens, config kwargs)
ENCODERS: dict[str, tuple[str, dict, dict]] = {
    "bert": ("wordpiece", BERT_SPECIALS, {}),
    "distilbert": ("wordpiece", BERT_SPECIALS, {"n_layers": 2, "n_heads": 4, "dim": 64, "hidden_dim": 128}),
    "electra": ("wordpiece", BERT_SPECIALS, {"embedding_size": 32}),  # embeddings projected up to the hidden size
    "roberta": ("bpe", ROBERTA_SPECIALS, {"max_position_embeddings": 130}),
    "xlm-roberta": ("unigram", ROBERTA_SPECIALS, {"max_position_embeddings": 130}),
    "albert": ("unigram", BERT_SPECIALS, {"embedding_size": 32}),
    # global attention in layer 0, a band of ±2 tokens (local_attention 4) in layers 1 and 2
    "modernbert": (
        "bpe",
        BERT_SPECIALS,
        {"num_hidden_layers": 3, "global_attn_every_n_layers": 3, "local_attention": 4},
    ),
    # DeBERTa-v3's settings: shared q/k projections for the position terms, log buckets, the newer head
    "deberta-v2": (
        "unigram",
        BERT_SPECIALS,
        {
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "position_buckets": 8,
            "max_relative_positions": 16,
            "share_att_key": True,
            "norm_rel_ebd": "layer_norm",
            "legacy": False,
        },
    ),
    # DeBERTa-v2's: its own position projections, "p2c|c2p" spelt as a string, no buckets, the legacy head
    "deberta-v2 (v2)": (
        "unigram",
        BERT_SPECIALS,
        {"relative_attention": True, "pos_att_type": "p2c|c2p", "share_att_key": False, "legacy": True},
    ),
}


def model_type(family: str) -> str:
    """The transformers ``model_type`` of an :data:`ENCODERS` entry (a variant is named after its type)."""
    return family.split(" ")[0]


def tokenizer(kind: str, specials: dict[str, str]):
    """A ``tokenizers.Tokenizer`` of ``kind`` over the test texts, adding ``[CLS] … [SEP]`` or ``<s> … </s>``:
    byte-level BPE trained on them, WordPiece and Unigram made from them (:mod:`tests.kit.family`)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    order = list(specials.values())
    if kind == "bpe":
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        trainer = trainers.BpeTrainer(
            vocab_size=500, special_tokens=order, initial_alphabet=alphabet, show_progress=False
        )
        tk.train_from_iterator(SP_TEXT, trainer=trainer)
        return _wrapped(tk, specials)
    # WordPiece and Unigram made, not trained: their trainers pick other pieces from run to run
    if kind == "wordpiece":
        tk = Tokenizer(wordpiece(order, specials["unk"]))
        tk.normalizer = normalizers.BertNormalizer(lowercase=True)
        tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tk.decoder = decoders.WordPiece()
    else:
        tk = Tokenizer(unigram(order, specials["unk"]))
        tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tk.add_special_tokens(order)
    return _wrapped(tk, specials)


def _wrapped(tk, specials: dict[str, str]):
    """``tk`` adding ``[CLS] … [SEP]`` (or ``<s> … </s>``) around a text, ``… [SEP] … [SEP]`` between a pair."""
    from tokenizers import processors

    cls, sep = specials["cls"], specials["sep"]
    tk.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B {sep}",
        special_tokens=[(cls, tk.token_to_id(cls)), (sep, tk.token_to_id(sep))],
    )
    return tk


def build_encoder(family: str, out: Path, seed: int = 0) -> Path:
    """Write a tiny random ``family`` masked LM and its tokenizer to ``out``; returns ``out``."""
    from transformers import AutoConfig, AutoModelForMaskedLM, PreTrainedTokenizerFast

    kind, specials, extra = ENCODERS[family]
    tk = tokenizer(kind, specials)
    out.mkdir(parents=True, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tk, **{f"{k}_token": v for k, v in specials.items()}).save_pretrained(out)
    ids = {f"{k}_token_id": tk.token_to_id(v) for k, v in specials.items() if k in ("pad", "cls", "sep")}
    kwargs = dict(
        num_hidden_layers=2,
        num_attention_heads=4,
        hidden_size=64,
        intermediate_size=128,
        max_position_embeddings=128,
        vocab_size=tk.get_vocab_size(),
        **ids,
    )
    if family == "modernbert":
        kwargs.update(bos_token_id=ids["cls_token_id"], eos_token_id=ids["sep_token_id"])
    config = AutoConfig.for_model(model_type(family), **(kwargs | extra))
    torch.manual_seed(seed)
    model = AutoModelForMaskedLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(QK_NAMES):
                p.mul_(QK_GAIN)
            if name.endswith(("embeddings_project.weight", "embedding_hidden_mapping_in.weight")):
                p.mul_(QK_GAIN)  # ELECTRA's, ALBERT's small embeddings brought up to the size a layer norm gives
            if name.endswith("attn.Wqkv.weight"):  # ModernBERT: q, k and v in one; only q and k scaled
                p[: 2 * config.hidden_size].mul_(QK_GAIN)
    model.save_pretrained(out)
    return out
