"""Opening a GGUF file through transformers' GGUF loader, as a transformers backend.

transformers reads a ``.gguf`` file's metadata as the config and the tokenizer and dequantizes
its tensors to full precision (``from_pretrained(dir, gguf_file=file)``, with the ``gguf`` and
``accelerate`` packages: ``pip install "attnscope[gguf]"``); the model then runs through our
attention function like any other transformers family (:mod:`model.families.backend`). Everything
that can be told before that is told first, in one line (:func:`model.sources.gguf_file.preflight`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..backends import DTYPES
from ..chat import tokenizer_template, with_chat
from ..families.attention import IMPLEMENTATION, register
from ..families.backend import TransformersBackend
from ..ours.checkpoint import CheckpointError
from ..ours.tokenizer import BPETokenizer
from .gguf_file import gib, preflight
from .gguf_header import GGUFHeader


def load_gguf(path: str | Path, device: torch.device, dtype: str = "fp32"):
    """A GGUF file -> a :class:`~model.families.backend.TransformersBackend` (weights dequantized to ``dtype``)."""
    header = preflight(path, device, dtype)
    path = header.path
    from transformers import AutoModelForCausalLM, AutoTokenizer

    register()
    where = {"pretrained_model_name_or_path": str(path.parent), "gguf_file": str(path), "local_files_only": True}
    try:
        model = AutoModelForCausalLM.from_pretrained(**where, attn_implementation=IMPLEMENTATION, dtype=DTYPES[dtype])
    except (MemoryError, torch.OutOfMemoryError) as e:
        raise CheckpointError(
            f"{path.name}: out of memory dequantizing {header.parameters / 1e9:.2f} B parameters to {dtype}"
        ) from e
    except Exception as e:  # noqa: BLE001 -- the loader raises many types; each is one line here
        raise CheckpointError(f"cannot load {path} through transformers' GGUF loader: {_one_line(e)}") from e
    if getattr(model.config, "is_encoder_decoder", False):
        raise CheckpointError(f"{path} holds an encoder-decoder model; attnscope shows decoder-only causal LMs")
    try:
        tok = AutoTokenizer.from_pretrained(**where)
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"cannot build the tokenizer from {path}'s metadata: {_one_line(e)}") from e
    backend_tk = tok.backend_tokenizer
    backend_tk.no_truncation()
    backend_tk.no_padding()
    tokenizer = BPETokenizer(backend_tk, bos_token=_bos_token(header, backend_tk))
    try:
        model.to(device)
    except torch.OutOfMemoryError as e:
        raise CheckpointError(
            f"the model ({gib(header.parameters * DTYPES[dtype].itemsize)} in {dtype}) does not fit on {device}; "
            "try --dtype bf16 or --device cpu"
        ) from e
    backend = TransformersBackend(model, tokenizer, device, name=header.display_name)
    backend.facts.source_format = "gguf"
    backend.chat_template = with_chat(backend.facts, tokenizer_template(tok))
    backend.facts.quantization = header.quantization
    return backend


def _bos_token(header: GGUFHeader, tk) -> str | None:
    """The BOS the file says to add (``tokenizer.ggml.add_bos_token``; SentencePiece files that do
    not say add it, as llama.cpp does)."""
    md = header.metadata
    add = md.get("tokenizer.ggml.add_bos_token")
    if add is None:
        add = md.get("tokenizer.ggml.model") == "llama"
    bos = md.get("tokenizer.ggml.bos_token_id")
    if not add or not isinstance(bos, int):
        return None
    return tk.id_to_token(bos)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:300]
