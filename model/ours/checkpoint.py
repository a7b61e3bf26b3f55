"""Save and load a model directory: weights, config, tokenizer and training metrics.

A checkpoint is a directory holding

* ``model.safetensors``  the weights (tied ``lm_head`` stored once, as ``transformer.wte``);
* ``config.json``        :class:`~model.ours.gpt.GPTConfig` as JSON;
* ``tokenizer.json``     the ``tokenizers`` byte-level BPE;
* ``training.json``      what training measured (optional).

Which loader opens a directory (ours, GPT-2 converted into ours, any other transformers
causal LM) is decided in one place, :mod:`model.registry`.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .gpt import GPT, GPTConfig
from .tokenizer import BPETokenizer

log = logging.getLogger(__name__)

SHIPPED = Path(__file__).parent / "checkpoints" / "attnscope-small"


class CheckpointError(RuntimeError):
    """A checkpoint directory is missing, incomplete or unreadable."""


def pick_device(requested: str | None = None, strict: bool = False) -> torch.device:
    """``requested`` (or ``$ATTNSCOPE_DEVICE``), else CUDA when present, else CPU.

    Asking for CUDA on a machine without it falls back to the CPU with a warning, or with
    ``strict`` (the command line: what was typed is what runs) raises :class:`CheckpointError`,
    as it does for a GPU index the machine does not have; ``auto`` always falls back silently.
    A name torch does not know raises :class:`CheckpointError` naming it.
    """
    requested = requested or os.environ.get("ATTNSCOPE_DEVICE") or None
    if requested in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(requested)
    except RuntimeError as e:
        raise CheckpointError(f"unknown device {requested!r} (use auto, cpu, cuda or cuda:N)") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        if strict:
            raise CheckpointError("CUDA is not available on this machine (torch.cuda.is_available() is False)")
        log.warning("CUDA was asked for (%s) but is not available; using the CPU", requested)
        return torch.device("cpu")
    if strict and dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise CheckpointError(f"this machine has {torch.cuda.device_count()} CUDA device(s), numbered from 0")
    return dev


def save_checkpoint(model: GPT, tokenizer: BPETokenizer, path: str | Path, training: dict | None = None) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(path / "model.safetensors"), metadata={"format": "attnscope"})
    (path / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2) + "\n")
    tokenizer.save(path / "tokenizer.json")
    if training is not None:
        (path / "training.json").write_text(json.dumps(training, indent=2) + "\n")
    return path


def read_config(path: Path) -> dict:
    """The ``config.json`` of a checkpoint directory, or a :class:`CheckpointError` naming the file."""
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise CheckpointError(f"checkpoint has no config.json: {cfg_file}")
    try:
        return json.loads(cfg_file.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read {cfg_file}: {e}") from e


def load_ours(path: Path) -> tuple[GPT, BPETokenizer]:
    """Our own checkpoint directory -> (model on the CPU, tokenizer); each error names its file."""
    for name in ("model.safetensors", "tokenizer.json"):
        if not (path / name).is_file():
            raise CheckpointError(f"checkpoint is missing {path / name}")
    # safetensors and tokenizers raise several types on bad files; each error names its file
    try:
        model = GPT(GPTConfig.from_dict(read_config(path)))
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{path / 'config.json'} does not describe a model: {e}") from e
    weights = path / "model.safetensors"
    try:
        state = load_file(str(weights))
        state["lm_head.weight"] = state["transformer.wte.weight"]
        model.load_state_dict(state, strict=True)
    except Exception as e:
        raise CheckpointError(f"cannot load the weights {weights}: {e}") from e
    try:
        tokenizer = BPETokenizer.load(path / "tokenizer.json")
    except Exception as e:
        raise CheckpointError(f"cannot load the tokenizer {path / 'tokenizer.json'}: {e}") from e
    return model, tokenizer


def read_training(path: Path) -> dict:
    """``training.json`` if present and readable, else ``{}``."""
    try:
        return json.loads((path / "training.json").read_text())
    except (OSError, ValueError):
        return {}
