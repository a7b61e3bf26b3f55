"""``GET /api/models``: what ``attnscope models`` finds, in the API's shape."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from ...model.sources.catalog import find_models
from ...model.sources.hub import cache_dir

LISTING_SECONDS = 5.0  # the page polls GET /api/models while a model loads: the disks are read once per this
_listing: tuple[float, tuple, list[dict]] | None = None  # (when, where it looked, what it found)


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


def shipped_model() -> dict:
    """The model that ships with attnscope (what ``attnscope serve`` opens when no model is named), as
    the list shows it: the entry GET /api/models starts with on a server started with it, where its
    name is the one its config gives (our GPT's ``name``)."""
    from ...model.ours.checkpoint import SHIPPED, read_config

    name = str(read_config(SHIPPED).get("name") or SHIPPED.name)
    return started_with(SHIPPED, name)


def local_models() -> list[dict]:
    """``[{"name", "source", "path", "size_bytes", "status", "open_with"}]``: the Hub cache's causal
    LMs, then the GGUF models of Ollama and LM Studio; ``status`` "ok" or why it cannot be opened.
    Read from disk at most once per :data:`LISTING_SECONDS` for the same places."""
    global _listing
    where = (str(cache_dir()), os.environ.get("OLLAMA_MODELS"), os.environ.get("HOME"))
    now = time.monotonic()
    if _listing is not None and _listing[1] == where and now - _listing[0] < LISTING_SECONDS:
        return _listing[2]
    _listing = (now, where, _read_models())
    return _listing[2]


def _read_models() -> list[dict]:
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


def machine_models(state) -> list[dict]:
    """What ``attnscope models`` finds, the model the server started with first (as listed there, or
    as a folder of its own when it is not: the shipped model, a checkpoint)."""
    found = local_models()
    first = state.started_with
    if first is None:
        return found
    listed = next((m for m in found if m["path"] == first["path"]), None)
    return [listed or first] + [m for m in found if m is not listed]
