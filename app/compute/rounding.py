"""How computed numbers are rounded before they are sent: fixed decimals or significant digits."""

from __future__ import annotations

import numpy as np
import torch

from ...model.fields import DECIMALS

PATTERN_DECIMALS = DECIMALS["pattern"]  # the weights (app.jsonfast writes them), the row entropies, generation rows
SCORE_DECIMALS = DECIMALS["attn_scores"]  # the scores and q, k, v
STAT_DIGITS = 6  # significant digits of the statistics and lesson values
PROB_DIGITS = 6  # significant digits of prediction probabilities (floored)


def round_fixed(t: torch.Tensor, decimals: int) -> np.ndarray:
    """Tensor -> C-contiguous float32 array rounded to ``decimals`` (NaN stays NaN)."""
    a = t.detach().to("cpu", torch.float32).numpy()
    return np.ascontiguousarray(np.round(a, decimals))


def _to_sig(a, digits: int, op) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    finite = np.isfinite(a)
    safe = np.where(finite & (a != 0), np.abs(a), 1.0)  # no log of 0, inf or NaN
    # below 1e-290 the power of ten would overflow float64: such values come out as 0
    exp = np.minimum(digits - 1 - np.floor(np.log10(safe)).astype(np.int64), 290)
    scale = 10.0 ** np.abs(exp)  # exact powers of ten
    out = np.where(exp >= 0, op(a * scale) / scale, op(a / scale) * scale)
    return np.where(finite, out, a)


def round_sig(a, digits: int = STAT_DIGITS) -> np.ndarray:
    """Round to ``digits`` significant digits."""
    return _to_sig(a, digits, np.round)


def floor_sig(a, digits: int = PROB_DIGITS) -> np.ndarray:
    """Round down to ``digits`` significant digits: keeps order, never increases a sum."""
    return _to_sig(a, digits, np.floor)
