"""``GET /api/models``: what ``attnscope models`` finds, the models of ``--models-dir`` and the model
the server started with, in the API's shape.

A request opens a model only by a ``name`` of this list (``POST /api/model``, ``/api/compare-models``),
never by a path: the server opens what its operator gave it (the Hub cache, Ollama's and LM Studio's
folders, ``--models-dir``, the model it started with) and nothing else. The list sends no absolute
path of the server either: each ``path`` is relative to the place it was found in (:func:`shown`).
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from ...model.sources.catalog import find_models, gguf_entry
from ...model.sources.hub import cache_dir
from ...model.sources.ollama import lmstudio_roots, ollama_roots

LISTING_SECONDS = 5.0  # the page polls GET /api/models while a model loads: the disks are read once per this
_listing: tuple[float, tuple, list[dict]] | None = None  # (when, where it looked, what it found)

ACCEPTED = (
    "a name from GET /api/models: a Hub model in the local cache, a folder or .gguf file under --models-dir, "
    "an Ollama or LM Studio model, or the model the server started with"
)


def _size(path: Path) -> int:
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files)


def started_with(checkpoint: Path, name: str) -> dict:
    """The model the server was started with, as an entry of the list (so that one can switch back to it)."""
    return {
        "name": name,
        "source": "dir",
        "path": str(checkpoint),
        "size_bytes": _size(checkpoint),
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


def dir_models(root: Path | None) -> list[dict]:
    """The models of ``--models-dir``: each folder in it holding a ``config.json`` (a transformers
    model folder, or attnscope's own) and each ``.gguf`` file in it, named by their names there."""
    if root is None or not root.is_dir():
        return []
    found = []
    for child in sorted(root.iterdir()):
        open_with = f"attnscope serve --checkpoint {shlex.quote(str(child))}"
        if child.name.startswith("."):
            continue
        if child.is_dir() and (child / "config.json").is_file():
            entry = {"name": child.name, "path": str(child), "size_bytes": _size(child), "status": "ok"}
            found.append({**entry, "source": "models-dir", "open_with": open_with})
        elif child.is_file() and child.suffix.lower() == ".gguf":
            found.append(gguf_entry("models-dir", child, child.name, open_with))
    return found


def local_models(models_dir: Path | None = None) -> list[dict]:
    """``[{"name", "source", "path", "size_bytes", "status", "open_with"}]``: the models of
    ``models_dir``, the Hub cache's causal LMs, then the GGUF models of Ollama and LM Studio;
    ``status`` "ok" or why it cannot be opened. Read from disk at most once per
    :data:`LISTING_SECONDS` for the same places."""
    global _listing
    where = (str(cache_dir()), os.environ.get("OLLAMA_MODELS"), os.environ.get("HOME"), str(models_dir))
    now = time.monotonic()
    if _listing is not None and _listing[1] == where and now - _listing[0] < LISTING_SECONDS:
        return _listing[2]
    found, _ = find_models([])
    _listing = (now, where, [_shape(m) for m in dir_models(models_dir) + found])
    return _listing[2]


def _shape(m: dict) -> dict:
    return {
        "name": m["name"] or "?",
        "source": m["source"],
        "path": m["path"],
        "size_bytes": m.get("size_bytes", m.get("bytes")),
        "status": m["status"],
        "open_with": m["open_with"],
    }


def machine_models(state) -> list[dict]:
    """What ``attnscope models`` finds and ``--models-dir`` holds, the model the server started with
    first (as listed there, or as a folder of its own when it is not: the shipped model, a checkpoint).
    Each entry's ``path`` is where it lies on the server: :func:`shown` makes an entry fit to send."""
    found = local_models(getattr(state.settings, "models_dir", None))
    first = state.started_with
    if first is None:
        return found
    listed = next((m for m in found if m["path"] == first["path"]), None)
    return [listed or first] + [m for m in found if m is not listed]


def roots(models_dir: Path | None) -> list[Path]:
    """The places the server was given models in: what a path sent is relative to."""
    return [p for p in (models_dir, cache_dir(), *ollama_roots(), *lmstudio_roots()) if p is not None]


def shown_path(path: str | None, places: Sequence[Path]) -> str | None:
    """``path`` relative to the first of ``places`` that holds it, else its own name: never an
    absolute path of the server."""
    if path is None:
        return None
    p = Path(path).resolve()
    for place in places:
        try:
            rel = p.relative_to(Path(place).resolve())
        except (ValueError, OSError):
            continue
        if rel.parts:
            return rel.as_posix()
    return p.name


def shown(entry: dict, places: Sequence[Path], serving: str | None) -> dict:
    """An entry as ``GET /api/models`` sends it: ``path`` (and the path in ``open_with``) relative to
    where it was found, and ``served``: whether it is the model answering now (named ``serving``)."""
    path = shown_path(entry["path"], places)
    open_with = entry["open_with"]
    if entry["path"]:
        for form in (shlex.quote(entry["path"]), entry["path"]):
            open_with = open_with.replace(form, shlex.quote(path))
    return {**entry, "path": path, "open_with": open_with, "served": entry["name"] == serving}
