"""``attnscope models``: the models on this machine and how to open each.

    attnscope models [--dir DIR ...] [--json]

(``--model ORG/NAME`` and ``--ollama NAME[:TAG]``, the options that open them, are in :mod:`.common`.)

Listing needs no network, no Ollama process and no ``gguf`` package: the Hub cache is scanned by
huggingface_hub, manifests are JSON and a GGUF header is read by :func:`model.sources.gguf_header.read_header`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import orjson

from .common import Failure


def add_models_command(sub) -> None:
    models = sub.add_parser(
        "models",
        help="list the models on this machine (the shipped model, the Hugging Face cache's causal LMs; "
        "GGUF: Ollama, LM Studio, --dir)",
    )
    models.add_argument(
        "--dir", action="append", default=[], metavar="DIR", help="also look for .gguf files under DIR (repeatable)"
    )
    models.add_argument("--json", action="store_true", help="print JSON instead of a table")
    models.set_defaults(func=cmd_models)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _params(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def _shipped() -> dict:
    """The shipped model, first in the list, with the columns of the table (its family, no quantization,
    its parameter count read from its weights' header)."""
    from safetensors import safe_open

    from ...model.ours.checkpoint import SHIPPED
    from ..compute.models import shipped_model

    entry = shipped_model()
    with safe_open(SHIPPED / "model.safetensors", framework="numpy") as f:
        params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118 (not a dict)
    return {
        **entry,
        "architecture": "attnscope",
        "quantization": "-",
        "parameters": params,
        "bytes": entry["size_bytes"],
    }


def cmd_models(args: argparse.Namespace) -> int:
    from ...model.sources.catalog import find_models

    for folder in args.dir:
        if not Path(folder).expanduser().is_dir():
            what = "not a folder" if Path(folder).expanduser().exists() else "no such folder"
            raise Failure(f"--dir {folder}: {what}")
    found, looked = find_models(args.dir)
    found = [_shipped(), *found]  # as GET /api/models lists it on a server started with it
    if args.json:
        sys.stdout.buffer.write(orjson.dumps({"models": found, "looked_in": looked}) + b"\n")
        sys.stdout.flush()
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
