"""``attnscope``: serve the app, train, inspect a text, export to Hugging Face format.

    attnscope serve [--host 127.0.0.1] [--port 8000] [--checkpoint DIR] [--device cpu] [--workers 1]
    attnscope train [--preset small ...]          (arguments go to model.train)
    attnscope inspect "The cat sat on the mat." [--json] [--layer L] [--head H] [--checkpoint DIR]
    attnscope export-hf OUT_DIR [--checkpoint DIR]
    attnscope serve --checkpoint FILE.gguf | --ollama NAME[:TAG]    (a GGUF model, dequantized)
    attnscope models [--dir DIR]                  (the GGUF models on this machine)
    attnscope atlas --corpus PATH [PATH ...] --out DIR [--checkpoint DIR] (every head over a corpus: docs/ATLAS.md)
    attnscope jlens --corpus PATH [PATH ...] --out LENS.pt [--checkpoint DIR] (a Jacobian lens: docs/JLENS.md)

Also ``python -m attnscope ...``. Settings not given as options come from ``ATTNSCOPE_*``
variables (see :mod:`app.settings`). Errors are one line on stderr and a non-zero exit: 2 for
a usage error, 1 for anything else. Here: the top-level parser and ``main``; each command, its
options and its work are in :mod:`.serve`, :mod:`.inspect`, :mod:`.export`, :mod:`.atlas`, :mod:`.jlens`
and :mod:`.models`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..errors import one_line
from .atlas import add_atlas_command
from .common import EXIT_USAGE, Failure, fail
from .export import add_export_command
from .inspect import add_inspect_command
from .jlens import add_jlens_command
from .models import add_models_command
from .serve import add_serve_command


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block), exit status 2."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"attnscope: {one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``attnscope`` parser: one subcommand per job, each calling its ``cmd_*`` function."""
    ap = _Parser(
        prog="attnscope",
        description="See attention in a causal transformer: our small GPT, or any local transformers model.",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_command(sub)
    sub.add_parser(
        "train", help="train a model (arguments go to python -m attnscope.model.ours.train; see attnscope train -h)"
    )
    add_inspect_command(sub)
    add_export_command(sub)
    add_models_command(sub)
    add_atlas_command(sub)
    add_jlens_command(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status. ``train`` hands its arguments to ``model.ours.train``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":
        from ...model.ours.train import main as train_main

        train_main(argv[1:], prog="attnscope train", parser=_Parser)
        return 0
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Failure as e:
        return fail(e, e.code)
    except BrokenPipeError:
        # the reader went away (`attnscope inspect ... | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
