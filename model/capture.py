"""Sinks that keep only what a view asked for, taken inside the forward pass.

A backend's ``run`` hands every layer's :class:`~model.gpt.AttentionTrace` to a sink as soon
as the layer has computed it. A plain ``list`` keeps all of it (fine for a 4×4 model and 64
tokens); :class:`Capture` reduces each layer on the model's device right away (statistics,
thumbnails, the selected heads' matrices) and lets the layer's T×T tensors go, so a request
for a 12×12 model at 1024 tokens never holds an ``(L, nh, T, T)`` tensor of any kind.

What it keeps is plain numpy, ready for any encoder (JSON, base64 typed arrays):

* per selected layer: its divisor, its mask, and for the selected heads
  ``fields`` (``(H, T, ·)`` float32; masked scores NaN), ``stats`` and ``thumbnail``
  (``(H, n, n)`` uint8: each head's pattern max-pooled on the device to at most n×n, then
  weight × 255 rounded);
* ``focus``: every asked-for field of one head at full resolution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F

from .gpt import AttentionTrace
from .stats import STAT_ROWS, STAT_SCALARS, head_stats_arrays

MATRIX_FIELDS = ("pattern", "attn_scores_raw", "attn_scores_uncapped", "attn_scores", "pattern_unscaled")
SCORE_FIELDS = ("attn_scores_raw", "attn_scores_uncapped", "attn_scores")  # NaN where masked
VECTOR_FIELDS = ("q", "k", "v")
STATS_BUDGET_BYTES = 48 << 20  # T×T temporaries of the statistics, per group of heads
BATCH_STATS_BYTES = 8 << 20  # below this (all selected layers' T×T scores), statistics in one call


@dataclass(frozen=True)
class Selection:
    """What one request wants from the forward pass."""

    layers: list[int]
    heads: list[int]  # per selected layer
    fields: frozenset[str] = frozenset()  # full matrices of every selected head
    stats: bool = False
    thumbnail: int | None = None  # n: each selected head's pattern max-pooled to at most n×n
    focus: tuple[int, int] | None = None  # (layer, head) sent at full resolution
    focus_fields: frozenset[str] = frozenset()

    @property
    def needs_unscaled(self) -> bool:
        """The statistics do not need the unscaled softmax built (see :mod:`model.stats`)."""
        return "pattern_unscaled" in self.fields or "pattern_unscaled" in self.focus_fields


@dataclass
class LayerCapture:
    layer: int
    divisor: float
    mask: np.ndarray  # (T, T) bool
    softcap: float | None = None  # the layer's attention logit softcap (Gemma 2), None if none
    window: int | None = None  # the sliding window its mask applied, None if none (or the mask is off)
    fields: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (H, T, ·) float32
    stats: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (H,) float64 or (H, T) float32
    thumbnail: np.ndarray | None = None  # (H, n, n) uint8
    thumbnail_mask: np.ndarray | None = None  # (n, n) uint8, 1 where any cell of the block may attend


def thumbnail_block(T: int, n: int) -> int:
    """Tokens per thumbnail cell: the smallest k with ceil(T / k) <= n."""
    return max(1, math.ceil(T / n))


def thumbnails(pattern: torch.Tensor, n: int) -> torch.Tensor:
    """(H, T, T) weights -> (H, m, m) uint8: the maximum of each k×k block of cells
    (k = :func:`thumbnail_block`, the last block of a row or column may be shorter,
    m = ceil(T / k) <= n), × 255, rounded.

    Max-pooling keeps a one-cell diagonal visible at any reduction (an average would fade it);
    cell (i, j) covers queries ``i·k ..`` and keys ``j·k ..``, up to k of each.
    """
    k = thumbnail_block(pattern.shape[-1], n)
    pooled = F.max_pool2d(pattern.float(), k, ceil_mode=True) if k > 1 else pattern.float()
    return (pooled * 255).round_().to(torch.uint8)


def _cpu(x: torch.Tensor) -> np.ndarray:
    return x.detach().to("cpu", torch.float32).numpy()


class Capture:
    """A trace sink: reduces each layer to what :class:`Selection` asks for, then drops it."""

    def __init__(self, sel: Selection) -> None:
        self.sel = sel
        self.needs_unscaled = sel.needs_unscaled
        self.layers: list[LayerCapture] = []
        self.focus: dict[str, np.ndarray] | None = None
        self.focus_stats: dict[str, np.ndarray] | None = None
        self.n_seen = 0
        self._last_z: torch.Tensor | None = None
        self._want = set(sel.layers)
        self._mask_thumbnails: list[tuple[torch.Tensor, np.ndarray]] = []
        self._pending: list[tuple[LayerCapture, AttentionTrace]] = []

    def finite(self) -> bool:
        """Whether the forward pass stayed finite: scores that overflow make a softmax row NaN,
        the residual stream carries it into every later layer, so the last layer's z tells."""
        return self._last_z is None or bool(torch.isfinite(self._last_z).all())

    def append(self, tr: AttentionTrace) -> None:
        layer = self.n_seen
        self.n_seen += 1
        self._last_z = tr.z
        sel = self.sel
        if sel.focus is not None and sel.focus[0] == layer:
            h = sel.focus[1]
            self.focus = {name: self._field(tr, name, [h])[0] for name in sel.focus_fields if name != "stats"}
            if "stats" in sel.focus_fields:
                self.focus_stats = {name: value[0] for name, value in self._stats(tr, [h]).items()}
        if layer not in self._want:
            return
        heads = sel.heads
        cap = LayerCapture(
            layer=layer, divisor=tr.divisor, mask=tr.mask.cpu().numpy(), softcap=tr.softcap, window=tr.window
        )
        for name in sel.fields:
            cap.fields[name] = self._field(tr, name, heads)
        if sel.thumbnail:
            cap.thumbnail = thumbnails(self._heads(tr.pattern, heads), sel.thumbnail).cpu().numpy()
            cap.thumbnail_mask = self._thumbnail_mask(tr.mask)
        if sel.stats and heads:
            T = tr.mask.shape[0]
            if len(sel.layers) * len(heads) * T * T * 4 <= BATCH_STATS_BYTES and tr.softcap is None:
                self._pending.append((cap, tr))  # small: all layers in one call, in finish()
            else:
                cap.stats = self._stats(tr, heads)
        self.layers.append(cap)

    def finish(self) -> None:
        """Statistics held back for one batched call (short inputs: fewer, larger operations)."""
        if not self._pending:
            return
        heads = self.sel.heads
        stacked = {
            name: torch.stack([self._heads(getattr(tr, name), heads).float() for _, tr in self._pending])
            for name in ("q", "k", "attn_scores_raw", "attn_scores", "pattern")
        }  # (layers, H, T, ·)
        masks = torch.stack([tr.mask for _, tr in self._pending])[:, None]  # (layers, 1, T, T)
        divisors = torch.tensor([tr.divisor for _, tr in self._pending], device=masks.device)
        same = bool((divisors == divisors[0]).all()) and bool((masks == masks[:1]).all())
        if not same:  # per-layer divisors or masks: one call per layer
            for cap, tr in self._pending:
                cap.stats = self._stats(tr, heads)
        else:
            tr0 = self._pending[0][1]
            values = head_stats_arrays(
                stacked["q"],
                stacked["k"],
                stacked["attn_scores_raw"],
                stacked["attn_scores"],
                stacked["pattern"],
                tr0.mask,
                tr0.divisor,
            )
            scalars = {n: values[n].double().cpu().numpy() for n in STAT_SCALARS}
            rows = {n: _cpu(values[n]) for n in STAT_ROWS}
            for li, (cap, _) in enumerate(self._pending):
                cap.stats = {**{n: v[li] for n, v in scalars.items()}, **{n: v[li] for n, v in rows.items()}}
        self._pending = []

    def _thumbnail_mask(self, mask: torch.Tensor) -> np.ndarray:
        """(m, m) uint8, 1 where any cell of the block may attend; computed once per distinct mask."""
        for seen, pooled in self._mask_thumbnails:
            if seen is mask or torch.equal(seen, mask):
                return pooled
        pooled = (thumbnails(mask[None].float(), self.sel.thumbnail)[0] // 255).cpu().numpy()
        self._mask_thumbnails.append((mask, pooled))
        return pooled

    @staticmethod
    def _heads(x: torch.Tensor, heads: list[int]) -> torch.Tensor:
        """(1, nh, T, ·) -> (H, T, ·), a view when all heads are selected in order."""
        x = x[0]
        if heads and heads == list(range(heads[0], heads[-1] + 1)):
            return x[heads[0] : heads[-1] + 1]  # a contiguous run: a view, no copy
        return x.index_select(0, torch.tensor(heads, dtype=torch.long, device=x.device))

    def _field(self, tr: AttentionTrace, name: str, heads: list[int]) -> np.ndarray:
        if name == "attn_scores_uncapped" and tr.attn_scores_uncapped is None:
            name = "attn_scores"  # no softcap: the scores softmax sees are raw / divisor
        x = self._heads(getattr(tr, name), heads)
        if name in SCORE_FIELDS:
            x = x.float().masked_fill(~tr.mask, float("nan"))  # masked: NaN (null in JSON)
        return np.ascontiguousarray(_cpu(x))

    def _stats(self, tr: AttentionTrace, heads: list[int]) -> dict[str, np.ndarray]:
        T = tr.mask.shape[0]
        group = max(1, STATS_BUDGET_BYTES // (4 * 4 * T * T))  # ~4 T×T float32 temporaries per head
        parts: list[dict[str, torch.Tensor]] = []
        for start in range(0, len(heads), group):
            hs = heads[start : start + group]
            q, k, raw, scores, pattern = (
                self._heads(getattr(tr, name), hs).float()
                for name in ("q", "k", "attn_scores_raw", "attn_scores", "pattern")
            )
            parts.append(head_stats_arrays(q, k, raw, scores, pattern, tr.mask, tr.divisor, tr.softcap))
        out = {name: torch.cat([p[name] for p in parts]).double().cpu().numpy() for name in STAT_SCALARS}
        out.update({name: _cpu(torch.cat([p[name] for p in parts])) for name in STAT_ROWS})
        return out
