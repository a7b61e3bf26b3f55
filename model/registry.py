"""One place that decides how a model directory is opened, from its ``config.json``.

=====================================  ==========================================  ============
``config.json``                        family                                      backend
=====================================  ==========================================  ============
no ``model_type`` (ours)               attnscope, the shipped model                our GPT
``model_type: gpt2``, plain GPT-2      GPT-2 converted into our GPT (exact)        our GPT
any other ``model_type``, or a GPT-2   GPT-NeoX/Pythia, Llama, Qwen2, Mistral,     transformers
our GPT cannot run exactly             Gemma 2, ... (``AutoModelForCausalLM``)
an encoder ``model_type``              BERT, RoBERTa, XLM-R, DistilBERT, ALBERT,   transformers
                                       ELECTRA, ModernBERT (``AutoModelForMaskedLM``)
``is_encoder_decoder``                 T5, mT5, UMT5, BART, mBART, Marian,         transformers
                                       Pegasus, T5Gemma (``AutoModelForSeq2SeqLM``)
``model_type: whisper``                Whisper, Distil-Whisper: the source a       transformers
                                       recording (``AutoModelForSpeechSeq2Seq``)
a ``vision_config``                    LLaVA, Gemma 3 (``AutoModelForImageText``   transformers
                                       ``ToText`` + ``AutoProcessor``)
=====================================  ==========================================  ============

A ``.gguf`` file (or a folder holding one and no ``config.json``) is read by transformers' GGUF
loader, its weights dequantized (:mod:`model.sources.gguf_load`).

Everything loads offline (``local_files_only``); nothing is downloaded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from .backends import DTYPES, LoadedModel, OursBackend
from .ours.checkpoint import SHIPPED, CheckpointError, load_ours, pick_device, read_config, read_training
from .speech.audio import hears

log = logging.getLogger(__name__)


def family_of(cfg: dict) -> str:
    """``"attnscope"`` for our config, else the transformers ``model_type``."""
    return str(cfg.get("model_type") or "attnscope")


@dataclass(frozen=True)
class Placement:
    """Where a transformers model's layers go, as accelerate places them through ``from_pretrained``:
    ``device_map`` ``"auto"``, ``"balanced"`` or ``{module name: device}`` (a GPU number, ``"cpu"``,
    ``"disk"``), ``max_memory`` ``{device: size}``, ``offload_folder`` for the layers put on disk."""

    device_map: str | dict | None = None
    max_memory: dict | None = None
    offload_folder: str | None = None

    def kwargs(self) -> dict:
        """The keyword arguments of ``from_pretrained`` this placement sets."""
        out = {"device_map": self.device_map}
        if self.max_memory:
            out["max_memory"] = self.max_memory
        if self.offload_folder:
            out["offload_folder"] = self.offload_folder
        return out


def load_model(
    path: str | Path | None = None,
    device: str | torch.device | None = None,
    dtype: str = "fp32",
    placement: Placement | None = None,
) -> LoadedModel:
    """Open a model directory (the shipped model when ``path`` is None) on ``device`` in eval mode.

    ``dtype``: ``fp32`` (default), ``bf16`` or ``fp16``; half precision only on a GPU. ``placement``
    with a ``device_map``: the layers spread over devices, the CPU or disk (a transformers checkpoint only).
    """
    path = Path(path) if path else SHIPPED
    dev = device if isinstance(device, torch.device) else pick_device(device)
    if dtype not in DTYPES:
        raise CheckpointError(f"unknown dtype {dtype!r} (use {', '.join(DTYPES)})")
    if dtype != "fp32" and dev.type == "cpu":
        raise CheckpointError(f"--dtype {dtype} needs a GPU; on the CPU attnscope runs fp32")
    from .sources.gguf_file import find_gguf

    gguf = find_gguf(path)  # a .gguf file, or a folder holding one
    mapped = placement is not None and placement.device_map is not None
    if mapped and (gguf is not None or family_of(read_config(path)) == "attnscope"):
        raise CheckpointError(
            f"--device-map places a transformers checkpoint's layers; {path.name} is "
            f"{'a GGUF file' if gguf is not None else 'an attnscope checkpoint'}: use --device"
        )
    if gguf is not None:
        from .sources.gguf_load import load_gguf

        return LoadedModel(backend=load_gguf(gguf, dev, dtype), path=gguf)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory not found: {path}")
    cfg = read_config(path)
    family = family_of(cfg)
    from .families.encoder import is_encoder, load_encoder_dir
    from .families.seq2seq import is_seq2seq, load_seq2seq_dir

    if family == "attnscope":
        model, tokenizer = load_ours(path)
        backend = OursBackend(model, tokenizer, dev, DTYPES[dtype])
    elif family == "gpt2" and not mapped and _our_gpt_runs(path):
        from .ours.gpt2_format import load_hf_dir

        model, tokenizer = load_hf_dir(path)
        backend = OursBackend(model, tokenizer, dev, DTYPES[dtype])
    elif is_encoder(cfg):  # BERT and its kin: a masked LM, every row sees every key
        backend = load_encoder_dir(path, dev, dtype, placement if mapped else None)
    elif hears(cfg):  # Whisper: an encoder-decoder whose source is a recording's features
        from .speech.backend import load_speech_dir

        backend = load_speech_dir(path, dev, dtype, placement if mapped else None)
    elif is_seq2seq(cfg):  # T5, BART and their kin: encoder, decoder and cross attention

        backend = load_seq2seq_dir(path, dev, dtype, placement if mapped else None)
    elif "vision_config" in cfg:  # an image-text-to-text model: its language model and its processor
        from .vision.backend import load_vision_dir

        backend = load_vision_dir(path, dev, dtype)
    else:
        from .families.backend import load_transformers_dir

        backend = load_transformers_dir(path, dev, dtype, placement if mapped else None)
        if not any(path.glob("*.safetensors")):
            backend.facts.source_format = "pytorch"
    from .sources.hub import hub_name_of

    backend.facts.name = hub_name_of(path) or backend.facts.name  # a Hub model by its name, not its commit
    return LoadedModel(backend=backend, path=path, training=read_training(path))


def _our_gpt_runs(path: Path) -> bool:
    """Whether our GPT computes this GPT-2 exactly (else transformers runs it)."""
    from .ours.gpt2_format import gpt_config_from_hf

    try:
        gpt_config_from_hf(read_config(path))
    except CheckpointError as e:
        log.info("%s: %s; opening it through transformers", path, e)
        return False
    return True


CONTEXT_KEYS = ("block_size", "max_position_embeddings", "n_positions", "n_ctx", "seq_length")


def context_tokens(path: str | Path | None) -> int | None:
    """The model's context in tokens, from its ``config.json`` alone (nothing is loaded);
    ``None`` when it cannot be told."""
    path = Path(path) if path else SHIPPED
    try:
        from .sources.gguf_file import find_gguf
        from .sources.gguf_header import read_header

        gguf = find_gguf(path)
        if gguf is not None:  # a GGUF file says it in its metadata: ARCH.context_length
            header = read_header(gguf)
            value = header.metadata.get(f"{header.architecture}.context_length")
            return int(value) if isinstance(value, int) and value > 0 else None
        cfg = read_config(path)
    except (CheckpointError, OSError, ValueError):
        return None
    for key in CONTEXT_KEYS:
        value = cfg.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None
