"""The command line's GGUF parts: ``--ollama NAME[:TAG]`` and ``attnscope models``.

    attnscope serve --ollama llama3.2:1b          the model blob Ollama pulled, found from its manifest
    attnscope serve --checkpoint FILE.gguf        a GGUF file (or a folder holding one)
    attnscope models [--dir DIR ...] [--json]     the GGUF models on this machine and how to open each

Nothing here needs the network, an Ollama process or the ``gguf`` package: manifests are JSON and
a GGUF header is read by :func:`model.gguf_header.read_header`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import orjson


class UsageError(ValueError):
    """Options that contradict each other (exit status 2)."""


def ollama_checkpoint(args: argparse.Namespace) -> str | None:
    """``--ollama NAME[:TAG]`` -> the path of its model blob, used as ``--checkpoint``; else ``args.checkpoint``.
    :class:`~model.checkpoint.CheckpointError` if it is not pulled, :class:`UsageError` with ``--checkpoint``."""
    name = getattr(args, "ollama", None)
    if not name:
        return args.checkpoint
    if args.checkpoint:
        raise UsageError("--checkpoint and --ollama both name a model; give one")
    from ..model.ollama import resolve_ollama

    return str(resolve_ollama(name))


def add_ollama_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ollama",
        metavar="NAME[:TAG]",
        help="a model pulled with Ollama (found in $OLLAMA_MODELS or ~/.ollama/models; no network)",
    )


def add_models_command(sub) -> None:
    models = sub.add_parser("models", help="list the GGUF models on this machine (Ollama, LM Studio, --dir)")
    models.add_argument(
        "--dir", action="append", default=[], metavar="DIR", help="also look for .gguf files under DIR (repeatable)"
    )
    models.add_argument("--json", action="store_true", help="print JSON instead of a table")
    models.set_defaults(func=cmd_models)


def _entry(source: str, path: Path | None, name: str | None, open_with: str) -> dict:
    from ..model.checkpoint import CheckpointError
    from ..model.gguf_file import check_readable, describe
    from ..model.gguf_header import read_header

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
    from ..model.ollama import gguf_files, list_ollama, lmstudio_roots, ollama_roots

    found, looked = [], []
    for root in ollama_roots():
        looked.append(f"Ollama: {root}")
        for m in list_ollama(root):
            found.append(_entry("ollama", m.blob, m.name, f"attnscope serve --ollama {shlex.quote(m.name)}"))
    places = [("lm-studio", r) for r in lmstudio_roots()] + [("dir", Path(d).expanduser()) for d in dirs]
    for source, root in places:
        looked.append(f"{'LM Studio' if source == 'lm-studio' else 'folder'}: {root}")
        for path in gguf_files(root):
            found.append(_entry(source, path, None, f"attnscope serve --checkpoint {shlex.quote(str(path))}"))
    return found, looked


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _params(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def cmd_models(args: argparse.Namespace) -> int:
    found, looked = find_models(args.dir)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps({"models": found, "looked_in": looked}) + b"\n")
        sys.stdout.flush()
        return 0
    if not found:
        print("no GGUF models found; looked in:\n  " + "\n  ".join(looked))
        return 0
    rows = [("NAME", "ARCH", "QUANT", "PARAMS", "SIZE", "STATUS", "OPEN WITH")]
    for e in found:
        status = e["status"] if len(e["status"]) <= 60 else e["status"][:57] + "..."
        rows.append(
            (
                e["name"] or "?",
                e.get("architecture") or "?",
                e.get("quantization") or "?",
                _params(e.get("parameters")),
                _size(e.get("bytes")),
                status,
                e["open_with"],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    print(f"\n{len(found)} model(s); looked in: " + "; ".join(looked))
    return 0
