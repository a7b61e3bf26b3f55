"""What a training run is set to: :class:`TrainConfig`, its :data:`PRESETS` (the shipped model's
and a tiny one for tests) and the learning-rate schedule it implies (:func:`lr_at`: linear warm-up,
then cosine decay, per phase). :mod:`.train` runs it; :mod:`.train_args` names its options on the
command line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .gpt import GPTConfig


@dataclass
class TrainConfig:
    corpus: str = "data/corpus"  # a directory with train.txt, val.txt, sentences_val.txt
    out: str = "runs/small"  # run directory: checkpoint, optimizer state, metrics
    model: GPTConfig = field(default_factory=GPTConfig)
    vocab_size: int = 4096
    batch_size: int = 16
    max_steps: int = 14_000
    max_minutes: float = 0.0  # stop (and save) after this long; 0 = no limit. Resume later.
    lr: float = 2e-3
    min_lr: float = 1e-4
    warmup_steps: int = 300
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    # The step at which the LR schedule (warm-up, then cosine to min_lr at max_steps) begins.
    # ``--resume --new-phase`` sets it to the resumed step: a second warm-up and cosine that
    # continue a finished run for more steps instead of jumping back to mid-schedule.
    phase_start: int = 0
    keep_snapshots: bool = True  # also keep each evaluated checkpoint under OUT/snapshots/
    repeat_frac: float = 0.5
    random_span_frac: float = 0.25  # of the repeated spans, the share that are random tokens
    eval_every: int = 500
    eval_windows: int = 64
    eval_sentences: int = 400
    seed: int = 1337
    threads: int = 0  # torch threads; 0 = leave torch's default


PRESETS: dict[str, TrainConfig] = {
    # the shipped model: 4 layers × 4 heads, d_model 128 (head size 32), context 256
    "small": TrainConfig(),
    # for tests: trains in seconds on a small text the test writes
    "tiny": TrainConfig(
        out="runs/tiny",
        model=GPTConfig(block_size=32, vocab_size=300, n_layer=2, n_head=2, n_embd=32),
        vocab_size=300,
        batch_size=8,
        max_steps=60,
        lr=3e-3,
        warmup_steps=10,
        eval_every=30,
        eval_windows=4,
        eval_sentences=16,
        keep_snapshots=False,
    ),
}


# The fields that make the LR schedule; saved with the training state so that a plain
# ``--resume`` continues the schedule it was on (a later phase included).
SCHEDULE = ("lr", "min_lr", "warmup_steps", "max_steps", "phase_start")


def lr_at(step: int, cfg: TrainConfig) -> float:
    """The learning rate at ``step``: a linear warm-up from the phase's start, then a cosine down to
    ``min_lr`` at ``max_steps``."""
    s, total = step - cfg.phase_start, cfg.max_steps - cfg.phase_start
    if s < cfg.warmup_steps:
        return cfg.lr * (s + 1) / cfg.warmup_steps
    progress = min(1.0, (s - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))
