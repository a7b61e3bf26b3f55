"""Max-pooling an attention matrix to a picture of at most n×n cells, exactly, a block of rows at a time.

A long text's T×T pattern is drawn as thumbnails: cell (i, j) is the largest weight of a k×k
block of queries and keys (k = :func:`thumbnail_block`). Max-pooling keeps a one-cell diagonal
visible at any reduction, where an average would fade it. :class:`Pool` fills such a picture
from blocks of query rows as the capture (:mod:`model.capture`) computes them.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F

from .fields import SCORE_FIELDS
from .stats import group_max


def thumbnail_block(T: int, n: int, S: int | None = None) -> int:
    """Tokens per thumbnail cell: the smallest k with ceil(T / k) <= n (and ceil(S / k) <= n for a T×S
    matrix, an encoder-decoder's cross stack: one k for both axes)."""
    return max(1, math.ceil(max(T, S or T) / n))


def thumbnails(pattern: torch.Tensor, n: int) -> torch.Tensor:
    """(H, T, T) weights -> (H, m, m) uint8: the maximum of each k×k block of cells
    (k = :func:`thumbnail_block`, the last block of a row or column may be shorter,
    m = ceil(T / k) <= n), × 255, rounded.

    Max-pooling keeps a one-cell diagonal visible at any reduction (an average would fade it);
    cell (i, j) covers queries ``i·k ..`` and keys ``j·k ..``, up to k of each.
    """
    k = thumbnail_block(pattern.shape[-2], n, pattern.shape[-1])
    pooled = F.max_pool2d(pattern.float(), k, ceil_mode=True) if k > 1 else pattern.float()
    return (pooled * 255).round_().to(torch.uint8)


class Pool:
    """A (H, T, S) matrix max-pooled to (H, ceil(T/k), ceil(S/k)), filled a block of rows at a time."""

    def __init__(self, H: int, T: int, S: int, k: int, device, fill: float = 0.0) -> None:
        self.k = k
        self.acc = torch.full((H, math.ceil(T / k), math.ceil(S / k)), fill, device=device)

    def add(self, rows: torch.Tensor, q0: int) -> None:
        """``rows`` (H, t, s): rows ``q0 .. q0 + t`` of the matrix over its first s keys. The rows before
        the block's first thumbnail-row boundary merge into the row they share with the block before; the
        rest go k rows at a time (a strided maximum: ``scatter_reduce`` costs several times that on the CPU)."""
        k = self.k
        pooled = group_max(rows.float(), k) if k > 1 else rows.float()  # (H, t, ceil(s/k))
        t, c = pooled.shape[1], pooled.shape[2]
        lead = min(t, -q0 % k)  # rows before the next boundary
        if lead:
            self._merge(q0 // k, pooled[:, :lead].amax(1, keepdim=True), c)
        if t > lead:
            rest = pooled[:, lead:]
            if k > 1:  # k rows at a time, the last run maybe shorter: group_max over the rows
                rest = group_max(rest.transpose(1, 2), k).transpose(1, 2)
            self._merge((q0 + lead) // k, rest, c)

    def _merge(self, r0: int, rows: torch.Tensor, c: int) -> None:
        """Thumbnail rows ``r0 ..`` (their first c cells) become the larger of what they hold and ``rows``."""
        part = self.acc[:, r0 : r0 + rows.shape[1], :c]
        part.copy_(torch.maximum(part, rows))


def pool_fill(name: str) -> float:
    """What a pooled matrix starts from: -inf for scores (a block of masked cells stays -inf), 0 for weights."""
    return float("-inf") if name in SCORE_FIELDS else 0.0


def pooled_input(name: str, x: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Scores enter a max-pool as -inf where masked (a block of masked cells only pools to -inf)."""
    x = x.float()
    return x.masked_fill(masked, float("-inf")) if name in SCORE_FIELDS else x


def unfill(name: str, pooled: torch.Tensor) -> torch.Tensor:
    """A pooled score matrix: -inf (every cell of the block masked) shown as NaN."""
    return pooled.masked_fill(torch.isneginf(pooled), float("nan")) if name in SCORE_FIELDS else pooled


def levels(weights: torch.Tensor) -> torch.Tensor:
    """Weights in [0, 1] as uint8 levels 0 .. 255 (the thumbnails' form on the wire); a differential
    pair's |pattern| above 1 (λ outside [0, 1]) shows as 255."""
    return (weights.clamp(0, 1) * 255).round_().to(torch.uint8)


def causal_levels(m: int) -> np.ndarray:
    """(m, m) uint8: the causal mask of an m-cell thumbnail, 1 where block (i, j) holds a key at or before one of
    its queries (j <= i; M is 0 after the query)."""
    return (np.arange(m)[None, :] <= np.arange(m)[:, None]).astype(np.uint8)
