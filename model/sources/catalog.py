"""The models on this machine that attnscope can open, and the command that opens each: the causal
LMs in the Hugging Face cache (:mod:`model.sources.hub`), the GGUF files Ollama pulled and LM Studio
downloaded (:mod:`model.sources.ollama`), and GGUF files in folders one names. ``attnscope models`` prints
them; ``GET /api/models`` sends them. Read from disk only: no network, no Ollama process.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ..ours.checkpoint import CheckpointError
from .gguf_file import check_readable, describe
from .gguf_header import read_header
from .hub import cache_dir, cached_models
from .ollama import gguf_files, list_ollama, lmstudio_roots, ollama_roots


def gguf_entry(source: str, path: Path | None, name: str | None, open_with: str) -> dict:
    """A GGUF model: what its header says, and "ok" or why it cannot be opened."""
    entry = {"source": source, "name": name, "path": str(path) if path else None, "open_with": open_with}
    if path is None:
        entry["status"] = "model blob missing (pull it again)"
        return entry
    try:
        header = read_header(path)
    except CheckpointError as e:
        entry["status"] = str(e).replace(f"{path} ", "", 1).replace(f"{path}: ", "", 1)
        return entry
    entry.update(describe(header))
    entry["name"] = name or path.name
    try:
        check_readable(header)
        entry["status"] = "ok"
    except CheckpointError as e:
        entry["status"] = str(e).replace(f"{path}: ", "", 1).replace(f"{path} ", "", 1)
    return entry


def find_models(dirs: list[str]) -> tuple[list[dict], list[str]]:
    """(every GGUF model found, the places looked in)."""

    found, looked = [], [f"Hugging Face cache: {cache_dir()}"]
    for m in cached_models():
        name = m["name"]
        entry = {**m, "open_with": f"attnscope serve --model {shlex.quote(name)}", "status": "ok"}
        found.append({**entry, "architecture": m["family"], "quantization": "-", "bytes": m["size_bytes"]})
    for root in ollama_roots():
        looked.append(f"Ollama: {root}")
        for m in list_ollama(root):
            found.append(gguf_entry("ollama", m.blob, m.name, f"attnscope serve --ollama {shlex.quote(m.name)}"))
    places = [("lm-studio", r) for r in lmstudio_roots()] + [("dir", Path(d).expanduser()) for d in dirs]
    for source, root in places:
        looked.append(f"{'LM Studio' if source == 'lm-studio' else 'folder'}: {root}")
        for path in gguf_files(root):
            found.append(gguf_entry(source, path, None, f"attnscope serve --checkpoint {shlex.quote(str(path))}"))
    return found, looked
