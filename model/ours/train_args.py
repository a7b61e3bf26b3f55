"""The options of ``attnscope train`` (``python -m attnscope.model.ours.train``), each with its help;
what they set is :class:`~.train_config.TrainConfig` (a preset's values, then the options given)."""

from __future__ import annotations

import argparse


def train_parser(presets: dict, prog: str | None = None, parser=argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser of ``train``: ``presets`` name -> :class:`~.train_config.TrainConfig` (its values are the defaults
    the help names); ``parser``, the ArgumentParser class (``attnscope train`` passes its own)."""
    small = presets["small"]
    ap = parser(prog=prog, description="Train an attnscope model")
    ap.add_argument(
        "--preset",
        choices=sorted(presets),
        default="small",
        help="the model and schedule to start from: small (the shipped model) or tiny (trains in seconds, for tests)",
    )
    ap.add_argument(
        "--corpus", help=f"folder holding train.txt and val.txt (default {small.corpus}; see model.ours.corpus)"
    )
    ap.add_argument("--out", help="run folder: checkpoint, optimizer state, metrics (default runs/PRESET)")
    ap.add_argument("--max-steps", type=int, help=f"optimizer steps in all (small: {small.max_steps:,})")
    ap.add_argument(
        "--max-minutes",
        type=float,
        help="stop (and save) once the run's total training time, earlier phases included, passes this",
    )
    ap.add_argument(
        "--batch-size", type=int, help=f"sequences per step (small: {small.batch_size} on the CPU, more on CUDA)"
    )
    ap.add_argument("--lr", type=float, help=f"peak learning rate, after the warm-up (small: {small.lr:g})")
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's own choice)")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/train_state.pt")
    ap.add_argument(
        "--new-phase",
        action="store_true",
        help="with --resume: start a fresh warm-up and cosine schedule at the resumed step "
        "(to train a finished run longer)",
    )
    ap.add_argument("--min-lr", type=float, help=f"learning rate the cosine ends at (small: {small.min_lr:g})")
    ap.add_argument(
        "--warmup-steps", type=int, help=f"steps of linear warm-up to the peak rate (small: {small.warmup_steps})"
    )
    ap.add_argument(
        "--repeat-frac",
        type=float,
        help=f"share of windows in which a span is copied further along (small: {small.repeat_frac:g})",
    )
    ap.add_argument(
        "--random-span-frac",
        type=float,
        help=f"of the copied spans, the share made of random tokens (small: {small.random_span_frac:g})",
    )
    return ap
