"""A Hugging Face cache written by the test, laid out as huggingface_hub writes it (no network):
``models--ORG--NAME/refs/main`` holds a commit, ``snapshots/<commit>/`` links each file to
``blobs/<sha256>``; and copies of a tiny transformers checkpoint, one with a layer's q/k weights changed."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def put_in_cache(
    cache: Path, repo: str, model_dir: Path, commit: str = "0123456789abcdef0123456789abcdef01234567"
) -> Path:
    """Copy ``model_dir``'s files into ``cache`` as revision ``main`` of ``repo``; returns the snapshot folder."""
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    (root / "blobs").mkdir(exist_ok=True)
    for f in sorted(model_dir.iterdir()):
        data = f.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / f.name)
    return snapshot


def copy_with(src: Path, out: Path, edit=None, **config) -> Path:
    """``src`` loaded by transformers (``config`` overrides), ``edit(model)`` applied, saved with its tokenizer."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(src, **config)
    if edit is not None:
        with torch.no_grad():
            edit(model)
    model.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / f, out / f)
    return out


def change_layer(model, layer: int) -> None:
    """Add seeded noise to attention layer ``layer``'s query and key weights (a Llama-style model)."""
    import torch

    g = torch.Generator().manual_seed(7)
    attn = model.model.layers[layer].self_attn
    for proj in (attn.q_proj, attn.k_proj):
        proj.weight.add_(0.5 * torch.randn(proj.weight.shape, generator=g))
