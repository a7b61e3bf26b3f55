"""``GET /api/models``: what ``attnscope models`` finds, in the API's shape."""

from __future__ import annotations

from ...model.catalog import find_models


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
