"""The command line's ways to name a model other than a folder: ``--model ORG/NAME[@REVISION]``
(the Hugging Face cache), ``--ollama NAME[:TAG]``, and ``attnscope models``.

    attnscope serve --model HuggingFaceTB/SmolLM2-135M   from the Hub cache (else downloaded)
    attnscope serve --ollama llama3.2:1b          the model blob Ollama pulled, found from its manifest
    attnscope serve --checkpoint FILE.gguf        a GGUF file (or a folder holding one)
    attnscope models [--dir DIR ...] [--json]     the models on this machine and how to open each

Listing needs no network, no Ollama process and no ``gguf`` package: the Hub cache is scanned by
huggingface_hub, manifests are JSON and a GGUF header is read by :func:`model.gguf_header.read_header`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from .cli_settings import Failure


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


def hub_checkpoint(args: argparse.Namespace) -> str | None:
    """``--model ORG/NAME[@REVISION]`` -> its folder in the Hugging Face cache (downloaded there if need be),
    used as ``--checkpoint``; else ``args.checkpoint``. :class:`UsageError` beside another model option."""
    name = getattr(args, "model", None)
    if not name:
        return args.checkpoint
    if args.checkpoint:
        raise UsageError("--model and --checkpoint (or --ollama) both name a model; give one")
    from ..model.hub import resolve_hub

    return str(resolve_hub(name))


def add_ollama_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ollama",
        metavar="NAME[:TAG]",
        help="a model pulled with Ollama (found in $OLLAMA_MODELS or ~/.ollama/models; no network)",
    )


def add_models_command(sub) -> None:
    models = sub.add_parser(
        "models", help="list the models on this machine (the Hugging Face cache's causal LMs; GGUF: Ollama, LM Studio, --dir)"
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


def cmd_models(args: argparse.Namespace) -> int:
    from ..model.catalog import find_models

    for folder in args.dir:
        if not Path(folder).expanduser().is_dir():
            what = "not a folder" if Path(folder).expanduser().exists() else "no such folder"
            raise Failure(f"--dir {folder}: {what}")
    found, looked = find_models(args.dir)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps({"models": found, "looked_in": looked}) + b"\n")
        sys.stdout.flush()
        return 0
    if not found:
        print("no models found; looked in:\n  " + "\n  ".join(looked))
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
