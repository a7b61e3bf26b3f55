"""``attnscope export-hf OUT_DIR``: write our own GPT in the Hugging Face GPT-2 layout."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .common import Failure


def add_export_command(sub) -> None:
    exp = sub.add_parser("export-hf", help="write the model in Hugging Face GPT-2 format")
    exp.add_argument("dir", help="output directory")
    exp.add_argument("--checkpoint", help="checkpoint directory (default: the shipped model)")
    exp.add_argument(
        "--name", help="the name attnscope shows for the copy (config.json attnscope_name; default: OUT_DIR's name)"
    )
    exp.set_defaults(func=cmd_export_hf)


def cmd_export_hf(args: argparse.Namespace) -> int:
    """Load the checkpoint (``--checkpoint``, else ``ATTNSCOPE_CHECKPOINT``, else the shipped
    model) on the CPU and write it to ``args.dir``, named ``--name`` (else the folder's name); a model of
    another family is refused."""
    from ...model.backends import OursBackend
    from ...model.ours.checkpoint import SHIPPED, CheckpointError
    from ...model.ours.gpt2_format import export_hf
    from ...model.registry import load_model

    source = args.checkpoint or os.environ.get("ATTNSCOPE_CHECKPOINT") or SHIPPED
    try:
        lm = load_model(source, "cpu")
    except CheckpointError as e:
        raise Failure(str(e)) from None
    if not isinstance(lm.backend, OursBackend):
        raise Failure(
            f"export-hf writes our own GPT; {source} is a {lm.facts.family} model already in transformers format"
        )
    try:
        out = export_hf(lm.model, lm.tokenizer, Path(args.dir), args.name or Path(args.dir).resolve().name)
    except (OSError, ValueError) as e:
        raise Failure(f"cannot export to {args.dir}: {e}") from None
    print(f"attnscope: exported {source} to {out} (Hugging Face GPT-2 format)")
    return 0
