"""Save and load a model directory: weights, config, tokenizer and training metrics.

A checkpoint is a directory holding

* ``model.safetensors``  the weights (tied ``lm_head`` stored once, as ``transformer.wte``);
* ``config.json``        :class:`~model.gpt.GPTConfig` as JSON;
* ``tokenizer.json``     the ``tokenizers`` byte-level BPE;
* ``training.json``      what training measured (optional).

A directory in Hugging Face GPT-2 format (``config.json`` with ``model_type: gpt2``) loads
too, through :mod:`model.hf`.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .gpt import GPT, GPTConfig
from .tokenizer import BPETokenizer

log = logging.getLogger(__name__)

SHIPPED = Path(__file__).parent / "checkpoints" / "attnscope-small"


class CheckpointError(RuntimeError):
    """A checkpoint directory is missing, incomplete or unreadable."""


@dataclass
class LoadedModel:
    model: GPT
    tokenizer: BPETokenizer
    device: torch.device
    path: Path
    training: dict = field(default_factory=dict)

    @property
    def config(self) -> GPTConfig:
        return self.model.config


def pick_device(requested: str | None = None) -> torch.device:
    """``requested`` (or ``$ATTNSCOPE_DEVICE``), else CUDA when present, else CPU.

    Asking for CUDA on a machine without it falls back to the CPU with a warning; a name
    torch does not know raises :class:`CheckpointError` naming it.
    """
    requested = requested or os.environ.get("ATTNSCOPE_DEVICE") or None
    if requested in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(requested)
    except RuntimeError as e:
        raise CheckpointError(f"unknown device {requested!r} (use auto, cpu, cuda or cuda:N)") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        log.warning("CUDA was asked for (%s) but is not available; using the CPU", requested)
        return torch.device("cpu")
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


def load_checkpoint(path: str | Path | None = None, device: str | torch.device | None = None) -> LoadedModel:
    """Load a checkpoint directory (ours or Hugging Face GPT-2 format) in eval mode."""
    path = Path(path) if path else SHIPPED
    dev = device if isinstance(device, torch.device) else pick_device(device)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory not found: {path}")
    cfg = read_config(path)

    if cfg.get("model_type") == "gpt2":
        from .hf import load_hf_dir

        model, tokenizer = load_hf_dir(path)
    else:
        for name in ("model.safetensors", "tokenizer.json"):
            if not (path / name).is_file():
                raise CheckpointError(f"checkpoint is missing {path / name}")
        # safetensors and tokenizers raise several types on bad files; each error names its file
        try:
            model = GPT(GPTConfig.from_dict(cfg))
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

    training = {}
    if (path / "training.json").is_file():
        try:
            training = json.loads((path / "training.json").read_text())
        except ValueError:
            training = {}
    model.to(dev).eval()
    return LoadedModel(model=model, tokenizer=tokenizer, device=dev, path=path, training=training)
