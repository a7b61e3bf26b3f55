"""Tiny random-weight encoder-decoders (T5, BART and their kin), written to disk the way a user's download is.

Each is built from a transformers config in the test (no download), its query and key weights scaled
up so patterns are far from uniform, with a tokenizer made here in the family's own kind: Unigram
(SentencePiece-style, :func:`tests.kit.family.unigram`) for T5, its source ending in ``</s>``; byte-level
BPE for BART, its source ``<s> … </s>``; saved with ``PreTrainedTokenizerFast`` so that ``AutoTokenizer``
reads the same files attnscope reads.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.kit.family import QK_GAIN, SP_TEXT, unigram

T5_SPECIALS = {"pad": "<pad>", "eos": "</s>", "unk": "<unk>"}
T5GEMMA_SPECIALS = {"pad": "<pad>", "eos": "<eos>", "bos": "<bos>", "unk": "<unk>"}  # its decoder starts at <bos>
BART_SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>", "mask": "<mask>"}
QK_NAMES = ("q.weight", "k.weight", "q_proj.weight", "k_proj.weight")  # T5's q, k; BART's q_proj, k_proj
QK_NORMS = ("q_norm.weight", "k_norm.weight")  # T5Gemma 2's norms of q and k (Gemma's: x · (1 + w))

T5_KWARGS = dict(
    d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
    relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0,
)
BART_KWARGS = dict(
    d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128, forced_eos_token_id=None,
)
# T5Gemma's encoder and decoder: Gemma 2 blocks, a sliding layer then a global one, a softcap
T5GEMMA_MODULE = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    intermediate_size=64, query_pre_attn_scalar=8, sliding_window=4,
    layer_types=["sliding_attention", "full_attention"],
)
# T5Gemma 2's encoder reads images too: a SigLIP tower, the smallest there is (a text-only source never runs it)
T5GEMMA2_VISION = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=16,
                       patch_size=8)

# family -> (tokenizer kind, special tokens, config kwargs); a variant is named "type (what differs)"
SEQ2SEQ: dict[str, tuple[str, dict, dict]] = {
    "t5": ("unigram", T5_SPECIALS, T5_KWARGS),
    "mt5": ("unigram", T5_SPECIALS, T5_KWARGS),
    "umt5": ("unigram", T5_SPECIALS, T5_KWARGS),  # a relative bias in every layer, not the first's shared
    "bart": ("bpe", BART_SPECIALS, BART_KWARGS | dict(decoder_start_token_id=2)),
    "mbart": ("bpe", BART_SPECIALS, BART_KWARGS | dict(decoder_start_token_id=2)),
    "marian": ("bpe", BART_SPECIALS, BART_KWARGS | dict(decoder_start_token_id=1)),  # sinusoidal positions
    "pegasus": ("bpe", BART_SPECIALS, BART_KWARGS | dict(decoder_start_token_id=1)),
    "t5gemma": (
        "unigram",
        T5GEMMA_SPECIALS,
        dict(encoder=T5GEMMA_MODULE, decoder=T5GEMMA_MODULE, decoder_start_token_id=2),
    ),
    "t5gemma2": (  # its decoder: one softmax over its own keys and the encoder's (merged attention)
        "unigram",
        T5GEMMA_SPECIALS,
        dict(encoder=dict(text_config=T5GEMMA_MODULE, vision_config=T5GEMMA2_VISION, mm_tokens_per_image=4),
             decoder=T5GEMMA_MODULE, decoder_start_token_id=2),
    ),
}


def model_type(family: str) -> str:
    """The transformers ``model_type`` of a :data:`SEQ2SEQ` entry."""
    return family.split(" ")[0]


def tokenizer(kind: str, specials: dict[str, str]):
    """A ``tokenizers.Tokenizer`` of ``kind``: Unigram (:func:`~tests.kit.family.unigram`) ending a text in ``</s>``, or
    byte-level BPE trained on the test texts, wrapping a text in ``<s> … </s>``."""
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
        tk.train_from_iterator(SP_TEXT, trainer=trainer)
    else:  # made, not trained: the Unigram trainer picks other pieces from run to run
        tk = Tokenizer(unigram(order, specials["unk"]))
        tk.add_special_tokens(order)
        tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    eos = specials["eos"]
    if "bos" in specials:
        bos = specials["bos"]
        single, tokens = f"{bos} $A {eos}", [(bos, tk.token_to_id(bos)), (eos, tk.token_to_id(eos))]
    else:
        single, tokens = f"$A {eos}", [(eos, tk.token_to_id(eos))]
    tk.post_processor = processors.TemplateProcessing(single=single, special_tokens=tokens)
    return tk


def build_seq2seq(family: str, out: Path, seed: int = 0, **config) -> Path:
    """Write a tiny random ``family`` encoder-decoder and its tokenizer to ``out``; returns ``out``. ``config``: more
    config fields (``max_position_embeddings=512`` for a long source)."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, PreTrainedTokenizerFast

    kind, specials, extra = SEQ2SEQ[family]
    tk = tokenizer(kind, specials)
    out.mkdir(parents=True, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tk, **{f"{k}_token": v for k, v in specials.items()}).save_pretrained(out)
    ids = {f"{k}_token_id": tk.token_to_id(v) for k, v in specials.items() if k in ("pad", "bos", "eos")}
    if family == "t5gemma":  # its vocabulary and special tokens in each of its two modules too
        extra = dict(extra, **{side: dict(extra[side], vocab_size=tk.get_vocab_size(), **ids) for side in
                               ("encoder", "decoder")})
    if family == "t5gemma2":  # the same in its decoder and its encoder's text model
        text = dict(extra["encoder"]["text_config"], vocab_size=tk.get_vocab_size(), **ids)
        extra = dict(extra, encoder=dict(extra["encoder"], text_config=text), decoder=text)
    config = AutoConfig.for_model(model_type(family), vocab_size=tk.get_vocab_size(), **ids, **(extra | config))
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(QK_NAMES):
                p.mul_(QK_GAIN / 4 if family.endswith("t5") else QK_GAIN)  # T5's own init is √d_k larger already
            elif name.endswith(QK_NORMS):  # T5Gemma 2 normalises q and k after their projections: (1 + w) scales them
                p.fill_(QK_GAIN**0.5 - 1)
    model.save_pretrained(out)
    return out
