"""What an answer holds of one value-linear layer (:mod:`model.families.implicit`), a block of rows at a time.

Each head's M (o_t = Σ_s M[t, s] v_s + skip · v_t) is computed a block of query rows at a time
(:meth:`~model.families.implicit.Scan.rows`) and reduced as it comes, so no (heads, T, T) tensor is
held unless the whole ``pattern`` is asked for:

* ``thumbnail``: M pooled to at most n × n cells, **signed**: each cell is the value of largest
  |M| in its k × k block (sign kept), so a one-cell diagonal stays visible as with the softmax
  heads' max-pooling, and a block of negative entries stays negative;
* ``stats``: what assumes a distribution is computed on p[t, s] = |M[t, s]| / Σ_s' |M[t, s']|
  (|M| normalised per row; a row of zeros has none and is left out of the means): ``entropy``
  (nats), ``max_weight`` and ``row_entropy``; the statistics of q·kᵀ, of the divisor and of an
  unscaled softmax have no counterpart and are NaN (``null`` in the answer).

A per-channel mixer's one "head" is the mean over channels of |M| (its thumbnail non-negative).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from ..pooling import Pool, thumbnail_block
from ..stats import STAT_ROWS, STAT_SCALARS
from .scans import Scan

IMPLICIT_STATS = ("entropy", "max_weight", "row_entropy")  # computed on |M| normalised per row; the rest NaN


@dataclass
class ImplicitLayer:
    """One value-linear layer in an answer: ``pattern`` (heads, T, T) float32 M per head (None unless asked),
    ``thumbnail`` (heads, m, m) float32 signed pooled M (None unless asked), ``stats`` name -> (heads,) float64
    or (heads, T) float32 (empty unless asked); for a per-channel mixer one head, the mean over channels of |M|;
    ``skip`` (heads,) or None."""

    layer: int
    mixer: str
    per_channel: bool
    skip: np.ndarray | None
    pattern: np.ndarray | None
    thumbnail: np.ndarray | None = None
    stats: dict[str, np.ndarray] | None = None


class SignedPool:
    """Pools signed (H, T, T) rows to (H, m, m): the value of largest |.| of each k × k block."""

    def __init__(self, H: int, T: int, k: int, device) -> None:
        self.high = Pool(H, T, T, k, device, fill=float("-inf"))
        self.low = Pool(H, T, T, k, device, fill=float("-inf"))  # the largest of −M: −(the smallest M)

    def add(self, rows: torch.Tensor, q0: int) -> None:
        self.high.add(rows, q0)
        self.low.add(-rows, q0)

    def result(self) -> torch.Tensor:
        high, low = self.high.acc, -self.low.acc
        return torch.where(high.abs() >= low.abs(), high, low)


class RowStats:
    """Entropy and top weight of p = |M| normalised per row, row by row."""

    def __init__(self, H: int, T: int, device) -> None:
        self.ent = torch.full((H, T), float("nan"), device=device, dtype=torch.float64)
        self.top = torch.full((H, T), float("nan"), device=device, dtype=torch.float64)

    def add(self, rows: torch.Tensor, q0: int) -> None:
        """Rows ``q0 ..`` of M: p = |M| / Σ_s |M|, its entropy −Σ p log p (0 log 0 = 0) and top weight; a row
        of zeros is NaN."""
        a = rows.abs()
        total = a.sum(-1, keepdim=True)
        p = a / total
        ent = -torch.xlogy(p, p).sum(-1).double()
        top = p.amax(-1).double()
        empty = total[..., 0] == 0
        self.ent[:, q0 : q0 + rows.shape[1]] = ent.masked_fill(empty, float("nan"))
        self.top[:, q0 : q0 + rows.shape[1]] = top.masked_fill(empty, float("nan"))

    def result(self) -> dict[str, np.ndarray]:
        H, T = self.ent.shape
        nan = np.full(H, np.nan)
        out = {name: nan.copy() for name in STAT_SCALARS}
        out["entropy"] = self.ent.nanmean(-1).cpu().numpy()
        out["max_weight"] = self.top.nanmean(-1).cpu().numpy()
        out["row_entropy"] = self.ent.float().cpu().numpy()
        out["row_entropy_unscaled"] = np.full((H, T), np.nan, dtype=np.float32)
        assert set(out) == set(STAT_SCALARS) | set(STAT_ROWS)
        return out


@contextlib.contextmanager
def flushed_subnormals():
    """Inside the block this thread's CPU flushes subnormal floats to 0 (they are below 1.2e-38, where M's
    decayed entries end up: products of them run 10× slower), and restores its setting after."""
    was = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if was:  # supported: back to what torch does by default
            torch.set_flush_denormal(False)


def _reduce(rows, r0: int, r1: int, per_channel: bool, out, pool, rows_stats) -> None:
    """One block of M's rows into what is asked: the whole M, the signed thumbnails, the statistics."""
    if per_channel:
        rows = rows.abs().mean(dim=0, keepdim=True)
    if out is not None:
        out[:, r0:r1] = rows.float().cpu().numpy()
    if pool is not None:
        pool.add(rows, r0)
    if rows_stats is not None:
        rows_stats.add(rows, r0)


def implicit_layer(
    scan: Scan, budget: int, pattern: bool = True, thumbnail: int | None = None, stats: bool = False
) -> ImplicitLayer:
    """``scan``'s matrices, computed a block of query rows at a time within ``budget`` bytes of temporaries:
    the whole M when ``pattern``, signed thumbnails of at most ``thumbnail`` cells a side, the statistics."""
    heads, T = scan.v.shape[0], scan.v.shape[1]
    n = 1 if scan.per_channel else heads
    out = np.zeros((n, T, T), dtype=np.float32) if pattern else None
    device = scan.v.device
    pool = SignedPool(n, T, thumbnail_block(T, thumbnail), device) if thumbnail else None
    rows_stats = RowStats(n, T, device) if stats else None
    with flushed_subnormals():
        for r0, r1, rows in scan.blocks(budget):
            _reduce(rows, r0, r1, scan.per_channel, out, pool, rows_stats)
    # a per-channel skip (Mamba-1's D over thousands of channels) is not sent
    skip = None if scan.skip is None or scan.per_channel else scan.skip.cpu().numpy().astype(np.float32)
    thumb = None if pool is None else pool.result().float().cpu().numpy()
    return ImplicitLayer(
        scan.layer, scan.mixer, scan.per_channel, skip, out, thumb, rows_stats.result() if rows_stats else None
    )
