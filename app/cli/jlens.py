"""``attnscope jlens``: fit a Jacobian lens over a corpus and write it in the published format.

    attnscope jlens --corpus notes.txt more.jsonl --out lens.pt [--checkpoint DIR | --model ORG/NAME]
                    [--seq-len 128] [--skip-first 16] [--prompts N] [--dim-batch 32] [--layers 0 1 ...] [--resume]
                    [--engine ray [--address ADDR]]

The corpus is checked before the model loads (one line naming a bad file, exit 1). Ctrl+C leaves
``LENS.pt.partial``; ``--resume`` continues it. See :mod:`model.jlens` and docs/JLENS.md.
"""

from __future__ import annotations

import argparse
import sys

from .atlas import EXIT_INTERRUPTED
from .common import Failure, add_model_options, corpus_job, whole_number

_positive, _count = whole_number(1), whole_number(0)


def add_jlens_command(sub) -> None:
    jl = sub.add_parser("jlens", help="fit a Jacobian lens over a corpus (serve --jlens reads it)")
    jl.add_argument("--corpus", nargs="+", required=True, metavar="PATH",
                    help="the atlas's corpus formats: .txt, .jsonl or .parquet; each document is one prompt")
    jl.add_argument("--out", required=True, metavar="LENS.pt", help="the lens file to write")
    add_model_options(jl)
    jl.add_argument("--seq-len", type=_positive,
                    help="tokens a prompt keeps (default 128, or the model's context if shorter)")
    jl.add_argument("--skip-first", type=_count, default=16,
                    help="positions left out at the start of each prompt (default 16)")
    jl.add_argument("--prompts", type=_positive, metavar="N", help="stop after N prompts (default: the whole corpus)")
    jl.add_argument("--dim-batch", type=_positive, default=32, metavar="B",
                    help="output dimensions per backward pass: ceil(d_model / B) passes a prompt (default 32)")
    jl.add_argument("--layers", type=_count, nargs="+", metavar="L",
                    help="the source blocks to fit (default: every block before the last)")
    jl.add_argument("--resume", action="store_true", help="continue the fit a Ctrl+C interrupted (LENS.pt.partial)")
    jl.add_argument("--engine", choices=("local", "ray"), default="local",
                    help="local (default) or ray: shards of prompts on Ray tasks, merged in order")
    jl.add_argument("--address", help="the Ray cluster to use with --engine ray (default: a local Ray, or RAY_ADDRESS)")
    jl.add_argument("--no-progress", action="store_true", help="no progress bar (shown only on a terminal anyway)")
    jl.set_defaults(func=cmd_jlens)


def cmd_jlens(args: argparse.Namespace) -> int:
    """Check the corpus, then the model options and the device; load the model; fit; write."""
    from ...model.jlens.build import JLensError, fit_lens
    from ...model.jlens.lensfile import LensFileError, load_lens
    from ...model.ours.checkpoint import CheckpointError
    from ...model.registry import load_model

    corpus, settings = corpus_job(args)
    try:
        lm = load_model(settings.checkpoint_path, settings.device, settings.dtype, settings.placement())
        out = fit_lens(
            lm,
            corpus,
            args.out,
            seq_len=args.seq_len,
            skip_first=args.skip_first,
            max_prompts=args.prompts,
            dim_batch=args.dim_batch,
            layers=args.layers,
            resume=args.resume,
            progress=False if args.no_progress else None,
            engine=args.engine,
            address=args.address,
        )
    except (CheckpointError, JLensError, LensFileError, ImportError, OSError) as e:
        raise Failure(str(e)) from None
    except KeyboardInterrupt:
        print(f"attnscope: interrupted; {args.out}.partial keeps the prompts so far: add --resume to continue",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    lens = load_lens(out)
    print(f"attnscope: Jacobian lens of blocks {lens.source_layers} over {lens.n_prompts} prompts written to {out}")
    return 0
