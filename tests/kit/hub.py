"""A Hugging Face cache written by the test, laid out as huggingface_hub writes it (no network):
``models--ORG--NAME/refs/main`` holds a commit, ``snapshots/<commit>/`` links each file to
``blobs/<sha256>``."""

from __future__ import annotations

import hashlib
import os
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
