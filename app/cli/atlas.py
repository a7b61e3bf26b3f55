"""``attnscope atlas``: measure what every head does over a corpus and write a head atlas.

    attnscope atlas --corpus notes.txt more.jsonl data.parquet --out atlas/ [--checkpoint DIR | --model ORG/NAME]
                    [--seq-len 512] [--batch-size 8] [--max-tokens N] [--resume] [--engine ray [--address ADDR]]
                    [--compare-model DIR | FILE.gguf | ORG/NAME]

The corpus is checked before anything loads or is written: a bad file stops the command with one
line naming it (and the line or row), exit 1, and nothing in ``--out``. Ctrl+C leaves a partial
atlas and its state file; ``--resume`` continues it. See :mod:`model.atlas.build` and docs/ATLAS.md.
"""

from __future__ import annotations

import argparse
import json

from .common import EXIT_USAGE, Failure, add_model_options, corpus_job, whole_number

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl+C


_positive = whole_number(1)


def add_atlas_command(sub) -> None:
    at = sub.add_parser("atlas", help="measure every head over a corpus and write a head atlas (Parquet)")
    at.add_argument("--corpus", nargs="+", required=True, metavar="PATH",
                    help=".txt (one document per blank-line-separated paragraph), .jsonl (a 'text' field per line) "
                    "or .parquet (a 'text' column) files")
    at.add_argument("--out", required=True, metavar="DIR", help="the atlas folder (created if need be)")
    add_model_options(at)
    at.add_argument(
        "--seq-len", type=_positive, help="tokens per window (default 512, or the model's context if shorter)"
    )
    at.add_argument("--batch-size", type=_positive, default=8, help="windows per forward pass (default 8)")
    at.add_argument("--max-tokens", type=_positive, help="stop after this many tokens of the corpus")
    at.add_argument(
        "--local-window", type=_positive, default=8, help="w of the 'local_fraction' metric, in tokens (default 8)"
    )
    at.add_argument(
        "--exemplars", type=int, default=8, metavar="K", help="top rows kept per head and metric (default 8)"
    )
    at.add_argument(
        "--compare-model", metavar="NAME",
        help="a second model (a folder, a .gguf file or a Hugging Face name) run on every batch too: adds the metric "
        "'divergence', each row's Jensen-Shannon divergence (bits) between the two models; same tokenizer and shape",
    )
    at.add_argument(
        "--stack", choices=("encoder", "decoder", "cross"),
        help="the attention stack measured (default: the decoder where the model has one, else its encoder); on an "
        "encoder-decoder each window is both the source and the teacher-forced target",
    )
    at.add_argument("--resume", action="store_true", help="continue an atlas a Ctrl+C interrupted in --out")
    at.add_argument("--engine", choices=("local", "ray"), default="local", help="local (default) or ray (Ray Data)")
    at.add_argument("--address", help="the Ray cluster to use with --engine ray (default: a local Ray, or RAY_ADDRESS)")
    at.add_argument("--concurrency", type=_positive, help="Ray actors (default: one per GPU, else one per CPU)")
    at.add_argument(
        "--no-progress", action="store_true", help="no progress bar (it is shown only on a terminal anyway)"
    )
    at.set_defaults(func=cmd_atlas)


def cmd_atlas(args: argparse.Namespace) -> int:
    """Check the corpus, then the model options and the device; load the model; measure; write."""
    from ...model.atlas.build import AtlasError, atlas
    from ...model.atlas.corpus import CorpusError
    from ...model.atlas.divergence import ModelMismatch
    from ...model.atlas.read import META_FILE
    from ...model.ours.checkpoint import CheckpointError
    from ...model.registry import load_model

    if args.exemplars < 0:
        raise Failure(f"--exemplars {args.exemplars}: must be 0 or more", EXIT_USAGE)
    corpus, settings = corpus_job(args)
    try:
        lm = load_model(settings.checkpoint_path, settings.device, settings.dtype, settings.placement())
        other = _compare_model(args.compare_model, settings)
        out = atlas(
            corpus,
            args.out,
            model=lm,
            compare_model=other,
            seq_len=args.seq_len,
            batch_size=args.batch_size,
            max_tokens=args.max_tokens,
            local_window=args.local_window,
            exemplars=args.exemplars,
            device=settings.device,
            dtype=settings.dtype,
            engine=args.engine,
            address=args.address,
            concurrency=args.concurrency,
            resume=args.resume,
            progress=False if args.no_progress else None,
            stack=args.stack,
        )
    except ModelMismatch as e:
        raise Failure(f"--compare-model {args.compare_model}: {e}") from None
    except (CorpusError, CheckpointError, AtlasError, ImportError) as e:
        raise Failure(str(e)) from None
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    meta = json.loads((out / META_FILE).read_text(encoding="utf-8"))
    print(f"attnscope: atlas of {meta['tokens_seen']} tokens ({meta['windows']} windows) written to {out}")
    return 0


def _compare_model(name: str | None, settings):
    """``--compare-model``: a folder or ``.gguf`` file on this machine, else a Hugging Face name (from the
    cache, else downloaded), loaded as the atlas's model is; None when not given. A model that cannot be
    opened: one line naming ``--compare-model``."""
    from pathlib import Path

    from ...model.ours.checkpoint import CheckpointError
    from ...model.registry import load_model
    from ...model.sources.hub import HUB_NAME, resolve_hub

    if not name:
        return None
    path = Path(name).expanduser()
    if not path.exists() and not HUB_NAME.match(name):
        raise Failure(f"--compare-model {name}: no such folder or file, nor a Hugging Face name (ORG/NAME)")
    try:
        path = path if path.exists() else resolve_hub(name)
        return load_model(path, settings.device, settings.dtype, settings.placement())
    except (CheckpointError, ValueError, OSError) as e:
        raise Failure(f"--compare-model {name}: {e}") from None
