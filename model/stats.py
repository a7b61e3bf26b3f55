"""Per-head statistics of one attention layer: the one implementation of them.

The variance lesson's numbers for a real model: how much q·kᵀ varies before and after the
divisor (``variance_ratio`` is ``divisor²``, so ``d_k`` for the trained default; NaN, ``null`` in
the API, where the scaled scores do not vary and the ratio is 0 / 0), and how
peaky each head's softmax rows are with and without the divisor (entropy, mean row maximum).
The service, ``attnscope inspect`` and :func:`model.inspection.head_stats` all call
:func:`head_stats_arrays`; it runs inside the forward pass, a layer at a time, on the
device the model is on.
"""

from __future__ import annotations

import torch

STAT_SCALARS = (
    "var_q",
    "var_k",
    "mean_scores_raw",
    "mean_scores",
    "var_scores_raw",
    "var_scores",
    "variance_ratio",
    "entropy",
    "entropy_unscaled",
    "max_weight",
    "max_weight_unscaled",
)
STAT_ROWS = ("row_entropy", "row_entropy_unscaled")


def _var(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """Population variance over ``dims`` (centred first; faster than ``Tensor.var`` on CPU)."""
    centred = x - x.mean(dims, keepdim=True)
    return (centred * centred).mean(dims)


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise dot product over the last axis: (..., T, T) -> (..., T). ``(a * b).sum(-1)`` is
    2-5× faster than ``torch.linalg.vecdot`` on the CPU (torch 2.13)."""
    return (a * b).sum(-1)


def _capped(raw: torch.Tensor, softcap: float, top: torch.Tensor) -> torch.Tensor:
    """softcap·tanh(raw / softcap), centred on each row's top key (what divisor 1 gives under softcapping)."""
    capped = torch.tanh(raw / softcap) * softcap
    return capped - capped.gather(-1, top[..., None])


def head_stats_arrays(
    q: torch.Tensor,
    k: torch.Tensor,
    raw: torch.Tensor,
    scores: torch.Tensor,
    pattern: torch.Tensor,
    mask: torch.Tensor,
    divisor: float,
    softcap: float | None = None,
) -> dict[str, torch.Tensor]:
    """Per-head statistics (``q, k (..., T, hs)``, the rest ``(..., T, T)``; ``...`` = heads, or layers and heads).

    The definitions of :func:`model.inspection.head_stats` (a test holds them equal):
    population means and variances over unmasked entries, row entropies in nats, mean row maxima.
    ``variance_ratio`` is NaN (undefined) where the scaled scores do not vary, e.g. a one-token
    text: its one score has variance 0, and 0 / 0 has no value (every other statistic is
    defined for any text, as each query sees at least itself). Computed in fewer passes over the
    T×T tensors, all of them on scores centred on each row's top score ``c``:

    * variances from per-row sums over the visible keys of ``y = raw - c`` and ``y²``
      (float64 across rows); the scaled scores are ``raw / divisor``, whose variance is
      ``var(raw) / divisor²`` (the model's float32 division moves it by less than 1e-6);
    * the entropy of a softmax row needs no logarithm per entry: for ``p = softmax(s)`` over
      the visible keys, ``H = logsumexp(s) - Σ p·s`` and ``logsumexp(s) = max s - log max p``,
      so ``H = -log max p - Σ p·(s - max s)``; centring keeps large scores (a small scale)
      from cancelling in float32;
    * the unscaled softmax (divisor 1) is never built: with ``e = exp(raw - c)`` over the
      visible keys and ``Z = Σ e``, its row maximum is ``1 / Z`` and its entropy
      ``log Z - Σ e·(raw - c) / Z``, one pass of ``exp`` instead of a T×T softmax to keep.

    With ``softcap`` (Gemma 2) the scores are not a multiple of the raw ones: their variance
    and the entropies are taken from the scores themselves.
    """
    s_max, top = scores.max(-1)  # (..., T); masked scores are -inf, never the maximum
    c = raw.gather(-1, top[..., None])  # (..., T, 1) the raw score of the row's top key
    raw_centred = raw - c

    visible = mask.to(raw.dtype)  # (T, T) 1 where the query sees the key
    y = raw_centred * visible  # masked entries 0
    s1 = y.sum(-1).double()  # (..., T) per-row sums of the visible centred scores
    s2 = _dot(y, raw_centred).double()  # and of their squares
    n_row = visible.sum(-1).double()  # (T,)
    c64 = c[..., 0].double()
    n = n_row.sum()
    mean = (s1 + n_row * c64).sum(-1) / n
    var_raw = ((s2 + 2 * c64 * s1 + n_row * c64 * c64).sum(-1) / n - mean * mean).clamp_min(0)
    if softcap is None:
        mean_scaled = mean / divisor
        var_scaled = var_raw / divisor**2
    else:
        s_vis = torch.where(mask, scores, torch.zeros((), dtype=scores.dtype, device=scores.device))
        mean_scaled = s_vis.sum((-2, -1)).double() / n
        var_scaled = ((s_vis.double() ** 2).sum((-2, -1)) / n - mean_scaled**2).clamp_min(0)
    # 0 / 0 (or x / 0) where the scaled scores do not vary: undefined, NaN
    ratio = torch.where(var_scaled > 0, var_raw / var_scaled.clamp_min(1e-300), torch.full_like(var_raw, float("nan")))

    # the unscaled softmax, from its normaliser: masked keys clamp to exp(0) = 1, then count 0
    u = raw_centred if softcap is None else _capped(raw, softcap, top)
    e = u.clamp_max(0).exp_().mul_(visible)  # (..., T, T)
    z = e.sum(-1).double()  # (..., T) >= 1: the top key contributes exp(0)
    pu_max = 1.0 / z
    ent_u = (z.log() - _dot(e, u).double() / z).clamp_min(0)
    del e
    p_max = pattern.amax(-1)
    if divisor >= 1 and softcap is None:
        # s - max s = (raw - c) / divisor up to the float32 rounding of s (|s| 6e-8 at most)
        p_dot = _dot(pattern, raw_centred).double() / divisor
    else:  # scores larger than the raw ones: use the model's own (float32) scaled scores
        lowest = torch.finfo(scores.dtype).min
        p_dot = _dot(pattern, scores.clamp_min(lowest) - s_max[..., None]).double()
    ent = (-p_max.double().log() - p_dot).clamp_min(0)
    return {
        "var_q": _var(q, (-2, -1)),
        "var_k": _var(k, (-2, -1)),
        "mean_scores_raw": mean,
        "mean_scores": mean_scaled,
        "var_scores_raw": var_raw,
        "var_scores": var_scaled,
        "variance_ratio": ratio,
        "entropy": ent.mean(-1),
        "entropy_unscaled": ent_u.mean(-1),
        "max_weight": p_max.mean(-1),
        "max_weight_unscaled": pu_max.mean(-1).to(p_max.dtype),
        "row_entropy": ent,
        "row_entropy_unscaled": ent_u,
    }
