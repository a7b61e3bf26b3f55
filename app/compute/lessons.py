"""What the lessons compute (``POST /api/lessons/*``): :mod:`attnscope.model.lessons`' small
experiments, their computed numbers rounded to 6 significant digits for the page."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from ...model import lessons
from .rounding import round_sig

_EXACT = {"T", "C", "B", "seed", "draw", "head_size", "samples", "logits", "factor", "agree", "hist_raw", "hist_scaled"}


def _rounded(result: Any) -> dict[str, Any]:
    """A lesson dataclass as a dict, its computed floats to ``STAT_DIGITS`` significant digits."""
    out = {}
    for key, value in asdict(result).items():
        if key in _EXACT or isinstance(value, (bool, int)):
            out[key] = value
        elif isinstance(value, float):
            out[key] = float(round_sig(value))
        else:
            out[key] = round_sig(np.asarray(value, dtype=np.float64)).tolist()
    return out


def lesson_bag_of_words(T: int, C: int, seed: int, draw: str = "rand", B: int = 4) -> dict[str, Any]:
    return _rounded(lessons.bag_of_words(T, C, seed, draw, B))


def lesson_softmax_scaling(logits: list[float], factor: float) -> dict[str, Any]:
    return _rounded(lessons.softmax_scaling(logits, factor))


def lesson_variance(head_size: int, T: int, seed: int, samples: int) -> dict[str, Any]:
    return _rounded(lessons.variance(head_size, T, seed, samples))
