"""Small, seeded computations behind the lessons: why attention is a masked average, why
scores are scaled.

Every function is pure (same arguments, same answer), validates its arguments with a
:class:`LessonArgumentError` (a ``ValueError``) that names the argument and its limit, and
returns a dataclass holding only Python ``int``/``float``/``bool`` and nested ``list`` values,
ready for JSON.

* :func:`bag_of_words` — the causal running mean of ``x`` computed three ways (a Python
  loop, a row-normalised lower-triangular matrix, a softmax over a ``-inf``-masked zero
  matrix); all three agree, and the third is exactly an attention pattern with equal scores.
  ``x`` is drawn as the seed notebooks draw it, ``torch.manual_seed(seed)`` then
  ``torch.rand(B, T, C)`` or ``torch.randn(B, T, C)``, and batch element 0 is returned, so the
  numbers equal, bit for bit, ``x[0]`` and ``xbow[0]`` in the notebook with the same draw,
  seed and shape (see :data:`PRESETS`).
* :func:`softmax_scaling` — the same logits through softmax before and after multiplying
  by ``factor``: larger spread, peakier distribution, lower entropy.
* :func:`variance` — for unit-variance ``q`` and ``k`` the raw scores ``q·k`` have variance
  about ``head_size``; multiplying by ``head_size ** -0.5`` brings it back to about 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import torch
from torch.nn import functional as F

MAX_T = 64
MAX_C = 16
MAX_B = 16
DRAWS = ("rand", "randn")  # torch.rand: uniform in [0, 1); torch.randn: standard normal
MAX_HEAD_SIZE = 512
MAX_SAMPLES = 256
MAX_LOGITS = 64
MAX_SEED = 2**63 - 1
HIST_EDGES = 41  # 40 bins


# ------------------------------------------------------------------ argument checks


class LessonArgumentError(ValueError):
    """A lesson argument out of its range; ``field`` names the argument."""

    def __init__(self, field: str, msg: str):
        super().__init__(msg)
        self.field = field


def _check_int(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LessonArgumentError(name, f"{name} must be an integer from {low} to {high}, got {value!r}")
    if not low <= value <= high:
        raise LessonArgumentError(name, f"{name} must be from {low} to {high}, got {value}")
    return value


def _check_factor(factor) -> float:
    if isinstance(factor, bool) or not isinstance(factor, Real):
        raise LessonArgumentError("factor", f"factor must be a finite number > 0, got {factor!r}")
    factor = float(factor)
    if not math.isfinite(factor) or factor <= 0:
        raise LessonArgumentError("factor", f"factor must be a finite number > 0, got {factor}")
    return factor


def _check_logits(logits) -> list[float]:
    if isinstance(logits, (str, bytes)) or not hasattr(logits, "__len__"):
        raise LessonArgumentError(
            "logits", f"logits must be a list of 1 to {MAX_LOGITS} finite numbers, got {type(logits).__name__}"
        )
    if not 1 <= len(logits) <= MAX_LOGITS:
        raise LessonArgumentError("logits", f"logits must hold 1 to {MAX_LOGITS} numbers, got {len(logits)}")
    out = []
    for i, v in enumerate(logits):
        if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(float(v)):
            raise LessonArgumentError("logits", f"logits must be finite numbers; logits[{i}] is {v!r}")
        out.append(float(v))
    return out


# How the seed notebooks draw the toy ``x`` of the bag-of-words cell (B, T, C = 4, 8, 2 in each):
# name -> (draw, seed, what the learner sees).
PRESETS = {
    "notebook-000": ("rand", 42, "notebook 000: set_seed(42); x = torch.rand(B, T, C)"),
    "notebook-001-003": ("randn", 42, "notebooks 001 and 003: torch.manual_seed(42); x = torch.randn(B, T, C)"),
    "lecture": ("randn", 1337, "the lecture: torch.manual_seed(1337); x = torch.randn(B, T, C)"),
}


def _check_draw(draw) -> str:
    if draw not in DRAWS:
        raise LessonArgumentError("draw", f"draw must be one of {', '.join(map(repr, DRAWS))}, got {draw!r}")
    return draw


def _generator(seed) -> torch.Generator:
    _check_int("seed", seed, 0, MAX_SEED)
    return torch.Generator().manual_seed(seed)


def _var(t: torch.Tensor) -> float:
    """Unbiased variance (torch's ``.var()``), taken as 0.0 for a single value, where it is undefined."""
    return float(t.var()) if t.numel() > 1 else 0.0


def _entropy(p: torch.Tensor) -> float:
    """Entropy in nats of a probability vector (0·log 0 taken as 0)."""
    return float(-(p * torch.log(p.clamp_min(1e-300))).sum()) + 0.0  # + 0.0 turns -0.0 into 0.0


# ------------------------------------------------------------------ bag of words


@dataclass
class BagOfWords:
    T: int
    C: int
    seed: int
    draw: str  # "rand" (uniform in [0, 1)) or "randn" (standard normal)
    B: int  # the batch drawn; only element 0 is returned
    x: list[list[float]]  # (T, C) x[0] of the (B, T, C) draw
    loop: list[list[float]]  # (T, C) mean of x[:t+1] by a Python loop
    matmul: list[list[float]]  # (T, C) row-normalised tril(ones) @ x
    softmax: list[list[float]]  # (T, C) softmax(zeros masked with -inf above the diagonal) @ x
    weights: list[list[float]]  # (T, T) the softmax weights: row t is 1/(t+1) on columns 0..t
    agree: bool  # all three are torch.allclose to each other
    max_abs_diff: float  # largest difference between any two of the three


def bag_of_words(T: int, C: int, seed: int, draw: str = "rand", B: int = 4) -> BagOfWords:
    """Causal running mean of ``x`` three ways, on ``x = torch.<draw>(B, T, C)`` after seeding with ``seed``.

    The notebooks' cells, run on the whole batch and cut to element 0 at the end, so that every
    number is the one torch prints there: a fresh ``torch.Generator().manual_seed(seed)`` gives
    the same stream as ``torch.manual_seed(seed)`` on the CPU, and ``randn`` fills a tensor in
    blocks, so ``randn(B, T, C)[0]`` is not ``randn(T, C)`` in general: ``B`` matters.
    """
    _check_int("T", T, 1, MAX_T)
    _check_int("C", C, 1, MAX_C)
    _check_int("B", B, 1, MAX_B)
    sample = torch.rand if _check_draw(draw) == "rand" else torch.randn
    xb = sample(B, T, C, generator=_generator(seed))  # (B, T, C)
    x = xb[0]  # (T, C)

    # 1. loop: row t is the mean of rows 0..t
    loop = torch.zeros(T, C)
    for t in range(T):
        loop[t] = torch.mean(x[: t + 1], dim=0)

    # 2. matmul: lower-triangular ones, each row divided by its sum, times x
    tril = torch.tril(torch.ones(T, T))  # (T, T)
    averaging = tril / tril.sum(dim=1, keepdim=True)
    matmul = (averaging @ xb)[0]  # (T, T) @ (B, T, C) -> (B, T, C), as the notebooks do

    # 3. softmax: equal scores (zeros), future positions set to -inf, softmax per row
    scores = torch.zeros(T, T).masked_fill(tril == 0, float("-inf"))
    weights = F.softmax(scores, dim=-1)  # (T, T)
    soft = (weights @ xb)[0]  # (T, C)

    pairs = ((loop, matmul), (loop, soft), (matmul, soft))
    agree = all(torch.allclose(a, b) for a, b in pairs)
    max_abs_diff = max(float((a - b).abs().max()) for a, b in pairs)
    return BagOfWords(
        T=T,
        C=C,
        seed=seed,
        draw=draw,
        B=B,
        x=x.tolist(),
        loop=loop.tolist(),
        matmul=matmul.tolist(),
        softmax=soft.tolist(),
        weights=weights.tolist(),
        agree=agree,
        max_abs_diff=max_abs_diff,
    )


# ------------------------------------------------------------------ softmax scaling


@dataclass
class SoftmaxScaling:
    logits: list[float]
    factor: float
    softmax: list[float]  # softmax(logits)
    softmax_scaled: list[float]  # softmax(logits * factor)
    var: float  # unbiased variance of logits (0.0 for a single logit)
    var_scaled: float  # unbiased variance of logits * factor (= factor² · var)
    entropy: float  # of softmax, in nats
    entropy_scaled: float  # of softmax_scaled, in nats


def softmax_scaling(logits: list[float], factor: float) -> SoftmaxScaling:
    """Softmax of ``logits`` and of ``logits * factor``, with their variances and entropies.

    Computed in float64. A factor above 1 spreads the logits (variance × factor²) and the
    softmax moves towards one-hot; below 1 it moves towards uniform.
    """
    values = _check_logits(logits)
    factor = _check_factor(factor)
    z = torch.tensor(values, dtype=torch.float64)
    zs = z * factor
    if not torch.isfinite(zs).all() or not math.isfinite(_var(zs)):
        raise LessonArgumentError(
            "factor", "logits × factor is too large to compute with; use smaller logits or a smaller factor"
        )
    p, ps = F.softmax(z, dim=-1), F.softmax(zs, dim=-1)
    return SoftmaxScaling(
        logits=values,
        factor=factor,
        softmax=p.tolist(),
        softmax_scaled=ps.tolist(),
        var=_var(z),
        var_scaled=_var(zs),
        entropy=_entropy(p),
        entropy_scaled=_entropy(ps),
    )


# ------------------------------------------------------------------ score variance


@dataclass
class Variance:
    head_size: int
    T: int
    seed: int
    samples: int
    var_q: float  # ≈ 1
    var_k: float  # ≈ 1
    var_scores_raw: float  # var(q @ kᵀ) ≈ head_size
    var_scores: float  # var(q @ kᵀ · head_size^-0.5) ≈ 1
    ratio: float  # var_scores_raw / var_scores = head_size (the factor the scaling removes)
    bin_edges: list[float]  # HIST_EDGES edges, symmetric around 0, spanning every raw score
    hist_raw: list[int]  # counts of raw scores per bin
    hist_scaled: list[int]  # counts of scaled scores on the same bins


def variance(head_size: int, T: int, seed: int, samples: int) -> Variance:
    """Variance of attention scores for ``q, k ~ N(0, 1)`` of shape ``(samples, T, head_size)``.

    Each score is a sum of ``head_size`` products of two independent unit normals, so its
    variance is ``head_size``; dividing by ``sqrt(head_size)`` makes it 1, which keeps the
    softmax over a row diffuse instead of nearly one-hot. Variances are unbiased, over all
    ``samples · T · T`` scores (0.0 when there is a single one).
    """
    _check_int("head_size", head_size, 1, MAX_HEAD_SIZE)
    _check_int("T", T, 1, MAX_T)
    _check_int("samples", samples, 1, MAX_SAMPLES)
    g = _generator(seed)
    q = torch.randn(samples, T, head_size, generator=g)
    k = torch.randn(samples, T, head_size, generator=g)
    raw = q @ k.transpose(-2, -1)  # (S, T, hs) @ (S, hs, T) -> (S, T, T)
    scaled = raw * head_size**-0.5  # (S, T, T)

    var_raw, var_scaled = _var(raw), _var(scaled)
    ratio = var_raw / var_scaled if var_scaled > 0 else float(head_size)  # the limit when scores do not vary

    # |scaled| <= |raw| since head_size >= 1, so edges covering raw cover both.
    half_width = float(raw.abs().max()) or 1.0
    edges = torch.linspace(-half_width, half_width, HIST_EDGES, dtype=torch.float64)
    hist_raw = torch.histogram(raw.flatten().double(), bins=edges).hist
    hist_scaled = torch.histogram(scaled.flatten().double(), bins=edges).hist
    return Variance(
        head_size=head_size,
        T=T,
        seed=seed,
        samples=samples,
        var_q=_var(q),
        var_k=_var(k),
        var_scores_raw=var_raw,
        var_scores=var_scaled,
        ratio=ratio,
        bin_edges=edges.tolist(),
        hist_raw=[int(c) for c in hist_raw.tolist()],
        hist_scaled=[int(c) for c in hist_scaled.tolist()],
    )
