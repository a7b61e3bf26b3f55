"""``GET /api/models``: what ``attnscope models`` finds, in the API's shape."""

from __future__ import annotations

import shlex
from pathlib import Path

from ...model.catalog import find_models


def started_with(checkpoint: Path, name: str) -> dict:
    """The model the server was started with, as an entry of the list (so that one can switch back to it)."""
    files = [checkpoint] if checkpoint.is_file() else [f for f in checkpoint.rglob("*") if f.is_file()]
    return {
        "name": name,
        "source": "dir",
        "path": str(checkpoint),
        "size_bytes": sum(f.stat().st_size for f in files),
        "status": "ok",
        "open_with": f"attnscope serve --checkpoint {shlex.quote(str(checkpoint))}",
    }


def local_models() -> list[dict]:
    """``[{"name", "source", "path", "size_bytes", "status", "open_with"}]``: the Hub cache's causal
    LMs, then the GGUF models of Ollama and LM Studio; ``status`` "ok" or why it cannot be opened."""
    found, _ = find_models([])
    return [
        {
            "name": m["name"] or "?",
            "source": m["source"],
            "path": m["path"],
            "size_bytes": m.get("size_bytes", m.get("bytes")),
            "status": m["status"],
            "open_with": m["open_with"],
        }
        for m in found
    ]
