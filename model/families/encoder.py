"""Encoder-only models (BERT and its kin): every row sees every key, and the masked-LM head guesses
the token *at* each position.

A folder whose config names an encoder family (:data:`HEADS`) is opened with transformers'
``AutoModelForMaskedLM`` and ``attn_implementation="attnscope"``, as a decoder is: BERT, RoBERTa,
XLM-R, DistilBERT, ALBERT, ELECTRA and ModernBERT call transformers' AttentionInterface, so each
layer is recorded by :func:`~model.families.attention.attnscope_attention` exactly as eager computes
it. What differs from a decoder is said here, in :class:`EncoderBackend`:

* the tokenizer adds its own special tokens (``[CLS] … [SEP]``, ``<s> … </s>``), as
  ``AutoTokenizer(text)`` does, and ``[MASK]`` typed in a text is the tokenizer's mask token;
* the mask is the model's own whatever a request says: all True, or ModernBERT's band of
  ``±sliding_window`` tokens in its local layers (``causal=False`` has nothing to remove);
* :meth:`EncoderBackend.head` is the masked-LM head: its logits at position ``t`` guess the token at ``t``.

DeBERTa-v2/v3 computes its disentangled attention inside its own module, not through AttentionInterface:
:mod:`model.families.deberta` records that module's arithmetic in three parts. DeBERTa (v1) is
refused in one line (:func:`check_encoder`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from ..ours.checkpoint import CheckpointError
from ..ours.tokenizer import BPETokenizer
from . import deberta
from .backend import TransformersBackend, load_transformers_dir

# transformers' model_type -> the masked-LM head's modules, in the order they run on the last hidden state
HEADS: dict[str, tuple[str, ...]] = {
    "bert": ("cls",),
    "roberta": ("lm_head",),
    "xlm-roberta": ("lm_head",),
    "camembert": ("lm_head",),
    "albert": ("predictions",),
    "electra": ("generator_predictions", "generator_lm_head"),
    "distilbert": ("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector"),
    "modernbert": ("head", "decoder"),
    "deberta-v2": ("cls",),  # a legacy head; a newer one reads the word embeddings too (EncoderBackend.head)
}
# encoder families that transformers runs without AttentionInterface and attnscope does not record
UNRECORDED = {"deberta": "DeBERTa (v1)"}
# how each family encodes positions (ModelFacts.positions)
POSITIONS = {"modernbert": "rotary", "deberta-v2": "relative"}
# where each family keeps its layers, whose outputs are the residual stream (the lens reads it), and the
# norm between the last one and the head (none: BERT's layers end in their own norm)
LAYERS = {"distilbert": "transformer.layer", "modernbert": "layers"}  # else "encoder.layer"
FINAL_NORMS = {"modernbert": "final_norm"}
# families whose position ids start after the padding id (RoBERTa's pad + 1): fewer usable positions
OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert"}


def is_encoder(cfg: dict) -> bool:
    """Whether a ``config.json`` (as a dict) is an encoder-only model's."""
    kind = str(cfg.get("model_type") or "")
    return not cfg.get("is_decoder") and (kind in HEADS or kind in UNRECORDED)


def check_encoder(cfg: dict, path: Path) -> None:
    """:class:`CheckpointError` in one line for an encoder attnscope cannot record exactly."""
    kind = str(cfg.get("model_type") or "")
    if kind in UNRECORDED:
        raise CheckpointError(
            f"{path.name} is a {UNRECORDED[kind]} encoder: transformers computes its disentangled attention "
            "inside the model, not through its attention interface, and attnscope records it for DeBERTa-v2/v3 "
            "only"
        )


class EncoderBackend(TransformersBackend):
    """A transformers ``AutoModelForMaskedLM`` with every attention layer recorded."""

    architecture = "encoder"
    auto_class = "AutoModelForMaskedLM"
    calls: dict = {}  # an encoder keeps no cache

    def __init__(self, model: torch.nn.Module, tokenizer: BPETokenizer, device: torch.device, name: str):
        deberta.watch(model)  # DeBERTa-v2/v3: its own attention module, recorded in three parts
        super().__init__(model, tokenizer, device, name)
        self.facts.positions = POSITIONS.get(self.family, "learned")
        if self.family in OFFSET_POSITIONS:  # positions pad + 1 .. max_position_embeddings - 1
            self.facts.block_size -= int(model.config.pad_token_id) + 1
        for layer in self.facts.layers:
            if layer.get("window"):  # ModernBERT's local layers: a band on both sides of each query
                layer["note"] = f"local: each token sees the tokens within ±{layer['window']} of it"

    @classmethod
    def tokenizer_of(cls, path: Path, cfg) -> BPETokenizer:
        """The folder's tokenizer.json adding its own special tokens, with its mask token."""
        tokenizer = BPETokenizer.load(path / "tokenizer.json", specials=True)
        tokenizer.mask_token = mask_token(path)
        return tokenizer

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """(n, C) -> the masked-LM head's logits (n, V): at each position, its guesses for the token there."""
        if self.family == "deberta-v2" and not self.model.legacy:
            return self.model.lm_predictions(h, self.trunk.embeddings.word_embeddings)
        for name in HEADS[self.family]:
            h = getattr(self.model, name)(h)
        return h

    def residual_blocks(self) -> tuple[torch.nn.ModuleList, torch.nn.Module] | None:
        """The layers in order and the norm before the masked-LM head (an identity where there is none), for
        the lens; None for ALBERT, whose layers are one module used again and again."""
        if self.family == "albert":
            return None
        blocks = self.trunk.get_submodule(LAYERS.get(self.family, "encoder.layer"))
        norm = FINAL_NORMS.get(self.family)
        return blocks, self.trunk.get_submodule(norm) if norm else torch.nn.Identity()

    def run(self, ids, opts, sink, logits: bool = True):
        return super().run(ids, own_mask(opts), sink, logits)

    def hidden(self, ids, opts, sink):
        return super().hidden(ids, own_mask(opts), sink)

    def last_logits(self, idx, opts, at: int = -1, **inputs):
        return super().last_logits(idx, own_mask(opts), at, **inputs)


def own_mask(opts):
    """An encoder's mask is the model's own: the what-if ``causal=False`` has nothing to remove there."""
    return dataclasses.replace(opts, causal=True) if not opts.causal else opts


def mask_token(path: Path) -> str | None:
    """The tokenizer's mask token, from ``tokenizer_config.json`` or ``special_tokens_map.json``."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        f = path / name
        token = json.loads(f.read_text()).get("mask_token") if f.is_file() else None
        if isinstance(token, dict):
            token = token.get("content")
        if token:
            return str(token)
    return None


def load_encoder_dir(path: Path, device: torch.device, dtype: str = "fp32", placement=None) -> EncoderBackend:
    """Open a local encoder folder offline as :class:`EncoderBackend`; :class:`CheckpointError` on
    anything it cannot show."""
    from ..ours.checkpoint import read_config

    check_encoder(read_config(path), path)
    return load_transformers_dir(path, device, dtype, placement, kind=EncoderBackend)
