"""A sink that keeps only what a view asked for, taken inside the forward pass, a block at a time.

A backend's ``run`` hands each attention layer to its sink. A plain ``list`` gets one
:class:`~model.trace.AttentionTrace` of whole ``(B, nh, T, T)`` tensors per layer (fine for a 4×4
model and 64 tokens; :mod:`model.inspection` and the tests use it). :class:`Capture` is a
*blockwise* sink (:func:`model.trace.traced_attention`): the layer computes its attention a block of
query rows at a time, the block's size chosen from a memory budget, and the capture reduces each
block on the model's device as it arrives:

* the statistics of every selected head (:class:`model.stats.StatsAccumulator`, row by row, with the
  variances merged block by block);
* the thumbnails: each selected head's pattern max-pooled to at most n×n, block rows landing in
  their thumbnail rows with an ``amax`` scatter, so any block size pools exactly;
* the full matrices of the selected heads and of the focus head, where asked for; the focus head
  may instead come max-pooled (``focus_thumbnail``) and/or as the exact cells of one region.

No ``(nh, T, T)`` tensor exists at any time, and with a causal mask a block computes only the
keys up to its last query. Layers nothing is asked of run the fused fast path (``wants``).
:meth:`Capture.finish` moves everything to the host in one copy per dtype; what it keeps is
plain numpy, ready for any encoder (JSON, base64 typed arrays):

* per selected layer: its divisor, mask, softcap and window, and for the selected heads
  ``fields`` (``(H, T, ·)`` float32; masked scores NaN), ``stats`` and ``thumbnail``
  (``(H, n, n)`` uint8, weight × 255 rounded);
* ``focus``: every asked-for field of one head, at full resolution, pooled, or a region.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .blocks import block_budget, query_blocks
from .fields import LAYER_DEPENDENT, MATRIX_FIELDS, PART_FIELDS, ROW_FIELDS, SCORE_FIELDS, VECTOR_FIELDS
from .pooling import Pool, levels, pool_fill, pooled_input, thumbnail_block, thumbnails, unfill
from .stats import STAT_SCALARS, StatsAccumulator


@dataclass(frozen=True)
class CapturePlan:
    """What one request wants from the forward pass."""

    layers: list[int]
    heads: list[int]  # per selected layer
    fields: frozenset[str] = frozenset()  # full matrices of every selected head
    stats: bool = False
    thumbnail: int | None = None  # n: each selected head's pattern max-pooled to at most n×n
    focus: tuple[int, int] | None = None  # (layer, head) sent beside the selection
    focus_fields: frozenset[str] = frozenset()
    focus_thumbnail: int | None = None  # the focus head's matrices max-pooled to at most n×n
    focus_region: tuple[int, int, int, int] | None = None  # [q0, q1) × [k0, k1): exact cells of the focus head
    budget_bytes: int | None = None  # a block's temporaries; None: :func:`block_budget` of the layer's device
    fuse: bool = False  # the statistics' block passes compiled (:func:`model.stats.fused_block_terms`)

    @property
    def needs_unscaled(self) -> bool:
        """The statistics do not need the unscaled softmax built (see :mod:`model.stats`)."""
        return "pattern_unscaled" in self.fields or "pattern_unscaled" in self.focus_fields


@dataclass
class LayerCapture:
    layer: int
    divisor: float
    mask: np.ndarray  # (T, T) bool; one array shared by every layer with the same mask
    softcap: float | None = None  # the layer's attention logit softcap (Gemma 2), None if none
    window: int | None = None  # the sliding window its mask applied, None if none (or the mask is off)
    sink_logit: np.ndarray | None = None  # (nh,) float32: each head's learned sink logit (gpt-oss), None if none
    fields: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (H, T, ·) float32, sink_mass (H, T)
    stats: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (H,) float64 or (H, T) float32
    thumbnail: np.ndarray | None = None  # (H, n, n) uint8
    thumbnail_mask: np.ndarray | None = None  # (n, n) uint8, 1 where any cell of the block may attend


class Capture:
    """A blockwise trace sink: reduces each layer to what :class:`CapturePlan` asks for, block by block."""

    blockwise = True

    def __init__(self, sel: CapturePlan) -> None:
        self.sel = sel
        self.needs_unscaled = sel.needs_unscaled
        self.layers: list[LayerCapture] = []
        self.focus: dict[str, np.ndarray] | None = None
        self.focus_stats: dict[str, np.ndarray] | None = None
        self.focus_pooled: dict[str, np.ndarray] | None = None  # name -> (m, m) float32, with focus_thumbnail
        self.focus_region: dict[str, np.ndarray] | None = None  # name -> (q1 - q0, k1 - k0), with focus_region
        self.focus_mask: np.ndarray | None = None  # (T, T) bool, the focus layer's mask
        self.focus_pooled_mask: np.ndarray | None = None  # (m, m) uint8 with focus_thumbnail
        self.host_copies = 0  # device-to-host transfers made (one per dtype on a GPU)
        self.blocks_per_layer: list[int] = []
        self._want = set(sel.layers)
        # every layer up to the last one asked for runs the explicit path, so that a layer's numbers never
        # depend on what else is selected; the layers after it only feed the predictions: the fast path
        self._last = max([*sel.layers, *([sel.focus[0]] if sel.focus is not None else [])], default=-1)
        self._finite: torch.Tensor | bool = True  # on the device until finish(): no sync per layer
        self._masks: list[tuple[torch.Tensor, np.ndarray]] = []  # distinct masks seen, and their host copy
        self._mask_thumbnails: dict[tuple[int, int], np.ndarray] = {}
        self._layer: _LayerState | None = None
        self._device_parts: list[tuple[object, str, str, torch.Tensor]] = []  # (owner, kind, name, tensor)

    # ---------------------------------------------------------------- what the model asks

    def wants(self, layer: int) -> bool:
        """Whether this layer runs the explicit path: it or a later layer is asked for (else: the fused fast path)."""
        return layer <= self._last

    def blocks(self, T: int, S: int, nh: int) -> list[tuple[int, int]]:
        """The query blocks ``[(q0, q1), ...]`` a layer of ``nh`` heads over ``S`` keys is computed in
        (called after :meth:`begin`, on the layer's device)."""
        budget = self.sel.budget_bytes
        if budget is None:
            budget = block_budget(self._layer.q.device if self._layer is not None else torch.device("cpu"))
        return query_blocks(T, S, nh, budget)

    def finite(self) -> bool:
        """Whether the forward pass stayed finite: scores that overflow make a softmax row NaN and
        the residual stream carries it into every later layer, so each captured layer's z tells."""
        return bool(self._finite)

    # ---------------------------------------------------------------- one layer, block by block

    def begin(
        self, layer: int, q, k, v, mask, divisor: float, softcap=None, window=None, sink_logit=None, extras=frozenset()
    ) -> None:
        """``q, k, v`` (1, nh, T|S, hs) of the layer (k and v one per query head), ``mask`` (T, S) bool,
        ``sink_logit`` (nh,) where the layer has learned sinks, ``extras`` the steps only some layers
        compute that this one does (:data:`~model.fields.LAYER_DEPENDENT`)."""
        sel = self.sel
        T, S = mask.shape
        st = _LayerState(layer=layer, mask=mask, q=q[0], k=k[0], v=v[0])
        host_mask = self._host_mask(mask)
        if layer in self._want:
            heads = sel.heads
            st.cap = LayerCapture(layer=layer, divisor=float(divisor), mask=host_mask, softcap=softcap, window=window)
            if sink_logit is not None:
                st.cap.sink_logit = sink_logit.float().cpu().numpy()
            st.heads = heads
            st.head_index = _index(heads, q.shape[1], q.device)
            if sel.stats and heads:
                sinks = None if sink_logit is None else _pick(sink_logit, st.head_index)
                qk = _pick(st.q, st.head_index), _pick(st.k, st.head_index)
                st.stats = StatsAccumulator(*qk, divisor, softcap, sinks, fuse=sel.fuse)
            if sel.thumbnail and heads:
                st.pool = Pool(len(heads), T, S, thumbnail_block(T, sel.thumbnail), q.device)
                st.cap.thumbnail_mask = self._thumbnail_mask(mask)
            for name in self._matrices(sel.fields, extras):
                st.full[name] = _blank(name, len(heads), T, S, q.device)
            for name in self._beside(ROW_FIELDS, sel.fields, extras):
                st.full[name] = torch.zeros(len(heads), T, device=q.device)
            for name in self._beside(PART_FIELDS, sel.fields, extras):
                st.full[name] = torch.zeros(len(heads), 2, T, S, device=q.device)
            for name in sel.fields & set(VECTOR_FIELDS):
                self._keep(st.cap, "field", name, _pick(getattr(st, name), st.head_index))
            self.layers.append(st.cap)
        if sel.focus is not None and sel.focus[0] == layer:
            h = sel.focus[1]
            st.focus_index = _index([h], -1, q.device)
            st.focus = True
            names = self._matrices(sel.focus_fields, extras)
            self.focus, self.focus_pooled, self.focus_region = {}, None, None
            self.focus_mask = host_mask
            parts = self._beside(PART_FIELDS, sel.focus_fields, extras)
            if sel.focus_thumbnail:
                self.focus_pooled = {}
                self.focus_pooled_mask = self._thumbnail_mask(mask, sel.focus_thumbnail)
                kf = thumbnail_block(T, sel.focus_thumbnail)
                # a differential pair's signed pattern starts from -inf: a max from 0 would hide its negative cells
                signed = "pattern_parts" in extras
                fill = {n: float("-inf") if signed and n == "pattern" else pool_fill(n) for n in names}
                st.focus_pools = {n: Pool(1, T, S, kf, q.device, fill[n]) for n in names}
                st.focus_pools.update({n: Pool(2, T, S, kf, q.device) for n in parts})
            if sel.focus_region is not None:
                q0, q1, k0, k1 = sel.focus_region
                self.focus_region = {}
                st.focus_region = {n: _blank(n, 1, q1 - q0, k1 - k0, q.device) for n in names}
            if not sel.focus_thumbnail and sel.focus_region is None:
                st.focus_full = {n: _blank(n, 1, T, S, q.device) for n in names}
                st.focus_full.update(
                    {n: torch.zeros(1, T, device=q.device) for n in self._beside(ROW_FIELDS, sel.focus_fields, extras)}
                )
                st.focus_full.update({n: torch.zeros(1, 2, T, S, device=q.device) for n in parts})
            for name in sel.focus_fields & set(VECTOR_FIELDS):
                self._keep(self, "focus", name, _pick(getattr(st, name), st.focus_index)[0])
            if "stats" in sel.focus_fields:
                sink = None if sink_logit is None else _pick(sink_logit, st.focus_index)
                qk = _pick(st.q, st.focus_index), _pick(st.k, st.focus_index)
                st.focus_stats = StatsAccumulator(*qk, divisor, softcap, sink, fuse=sel.fuse)
        self._layer = st

    def block(self, q0: int, q1: int, steps: dict[str, torch.Tensor | None]) -> None:
        """Rows ``q0 .. q1`` of the layer's named steps, each ``(1, nh, q1 - q0, s)`` over its first s keys."""
        st = self._layer
        s = steps["pattern"].shape[-1]
        mask = st.mask[q0:q1, :s]  # (t, s)
        masked = ~mask
        st.n_blocks += 1
        if st.cap is not None and st.heads:
            picked = {n: _pick(t[0], st.head_index) for n, t in steps.items() if t is not None}  # (H, t, s)
            if st.stats is not None:
                st.stats.add(picked["attn_scores_raw"], picked["attn_scores"], _softmax_of(picked), mask)
            if st.pool is not None:
                st.pool.add(_thumbnailed(picked), q0)
            _write_block(st.full, picked, q0, q1, s, masked)
        if st.focus:
            one = {n: _pick(t[0], st.focus_index) for n, t in steps.items() if t is not None}  # (1, t, s)
            if st.focus_stats is not None:
                st.focus_stats.add(one["attn_scores_raw"], one["attn_scores"], _softmax_of(one), mask)
            for name, pool in st.focus_pools.items():
                if name in PART_FIELDS:
                    rows = one[name][0]  # (2, t, s): the pair's two softmaxes
                else:  # a differential pair's signed pattern pools as |pattern| (block maxima of a signed map mislead)
                    rows = _thumbnailed(one) if name == "pattern" and pool.k > 1 else one[name]
                pool.add(pooled_input(name, rows, masked), q0)
            _write_block(st.focus_full, one, q0, q1, s, masked)
            if st.focus_region:
                r0, r1, c0, c1 = self.sel.focus_region
                a, b = max(q0, r0), min(q1, r1)
                if a < b and c0 < s:
                    for name, out in st.focus_region.items():
                        piece = _shown(
                            name,
                            one[name][:, a - q0 : b - q0, c0 : min(c1, s)],
                            masked[a - q0 : b - q0, c0 : min(c1, s)],
                        )
                        out[:, a - r0 : b - r0, : piece.shape[-1]] = piece

    def end(self, z: torch.Tensor) -> None:
        """The layer's output ``z`` (1, nh, T, hs): its finiteness, then the layer's results to keep."""
        st, self._layer = self._layer, None
        self._finite = torch.isfinite(z).all() & self._finite
        self.blocks_per_layer.append(st.n_blocks)
        if st.cap is not None:
            if st.stats is not None:
                for name, value in st.stats.result().items():
                    self._keep(st.cap, "stats", name, value)
            if st.pool is not None:
                self._keep(st.cap, "thumbnail", "", levels(st.pool.acc))
            for name, out in st.full.items():
                self._keep(st.cap, "field", name, out)
        if st.focus:
            for name, out in st.focus_full.items():
                self._keep(self, "focus", name, out[0])
            for name, pool in st.focus_pools.items():
                acc = pool.acc if name in PART_FIELDS else unfill(name, pool.acc[0])
                if name == "pattern":  # cells no block wrote (past a causal block's last key): weight 0
                    acc = acc.nan_to_num(neginf=0.0)
                self._keep(self, "focus_pooled", name, acc)
            for name, out in st.focus_region.items():
                self._keep(self, "focus_region", name, out[0])
            if st.focus_stats is not None:
                for name, value in st.focus_stats.result().items():
                    self._keep(self, "focus_stats", name, value[0])

    def finish(self) -> None:
        """Everything kept moves to the host: one copy per dtype on a GPU, none at all on the CPU."""
        parts, self._device_parts = self._device_parts, []
        for (owner, kind, name, _), host in zip(parts, self._to_host([t for *_, t in parts])):
            if kind == "field":
                owner.fields[name] = host
            elif kind == "stats":
                owner.stats[name] = host.astype(np.float64) if name in STAT_SCALARS else host
            elif kind == "thumbnail":
                owner.thumbnail = host
            elif kind == "focus_stats":
                self.focus_stats = self.focus_stats or {}
                self.focus_stats[name] = host.astype(np.float64) if name in STAT_SCALARS else host
            else:  # focus, focus_pooled, focus_region
                getattr(self, kind)[name] = host

    # ---------------------------------------------------------------- helpers

    def _keep(self, owner, kind: str, name: str, tensor: torch.Tensor) -> None:
        self._device_parts.append((owner, kind, name, tensor.detach()))

    def _to_host(self, tensors: list[torch.Tensor]) -> list[np.ndarray]:
        """The CPU's tensors as they are; a GPU's in one packed copy per device and dtype (device maps)."""
        out: list = [None] * len(tensors)
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for i, t in enumerate(tensors):
            if t.is_cpu:
                out[i] = (t if t.dtype == torch.uint8 else t.float()).contiguous().numpy()
            else:
                groups.setdefault((t.device, torch.uint8 if t.dtype == torch.uint8 else torch.float32), []).append(i)
        for (device, dtype), idx in groups.items():
            flat = torch.cat([tensors[i].to(dtype).reshape(-1) for i in idx])
            host = torch.empty(flat.shape, dtype=dtype, pin_memory=True)
            host.copy_(flat, non_blocking=True)
            self.host_copies += 1
            torch.cuda.synchronize(device)
            start = 0
            for i in idx:
                n = tensors[i].numel()
                out[i] = host[start : start + n].numpy().reshape(tensors[i].shape)
                start += n
        return out

    def _host_mask(self, mask: torch.Tensor) -> np.ndarray:
        """The layer's mask on the host, one array per distinct mask (most layers share one)."""
        for seen, host in self._masks:
            if seen is mask or (seen.shape == mask.shape and torch.equal(seen, mask)):
                return host
        host = mask.cpu().numpy()
        if mask.device.type != "cpu":
            self.host_copies += 1
        self._masks.append((mask, host))
        return host

    def _thumbnail_mask(self, mask: torch.Tensor, n: int | None = None) -> np.ndarray:
        """(m, m) uint8, 1 where any cell of the block may attend; computed once per distinct mask and size."""
        n = n or self.sel.thumbnail
        host = self._host_mask(mask)
        key = (id(host), n)
        if key not in self._mask_thumbnails:
            self._mask_thumbnails[key] = (thumbnails(torch.from_numpy(host)[None].float(), n)[0] // 255).numpy()
        return self._mask_thumbnails[key]

    @staticmethod
    def _beside(kind: tuple[str, ...], names, extras) -> list[str]:
        """The fields of ``kind`` to keep (per row: ``sink_mass``, ``gate``; a differential pair's
        ``pattern_parts``), asked for or beside ``pattern``; those only some layers compute, from a layer that does."""
        return [n for n in kind if (n not in LAYER_DEPENDENT or n in extras) and (n in names or "pattern" in names)]

    @staticmethod
    def _matrices(names, extras) -> list[str]:
        """The matrices to keep, never ``stats`` (taken apart); those only some layers compute
        (``attn_scores_uncapped`` from a softcap, MLA's two parts of q·kᵀ) only from a layer that does."""
        return [n for n in MATRIX_FIELDS if n in names and (n not in LAYER_DEPENDENT or n in extras)]


@dataclass
class _LayerState:
    layer: int
    mask: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    cap: LayerCapture | None = None
    heads: list[int] = field(default_factory=list)
    head_index: torch.Tensor | None = None
    stats: StatsAccumulator | None = None
    pool: Pool | None = None
    full: dict[str, torch.Tensor] = field(default_factory=dict)
    focus: bool = False
    focus_index: torch.Tensor | None = None
    focus_stats: StatsAccumulator | None = None
    focus_full: dict[str, torch.Tensor] = field(default_factory=dict)
    focus_pools: dict[str, Pool] = field(default_factory=dict)
    focus_region: dict[str, torch.Tensor] = field(default_factory=dict)
    n_blocks: int = 0


def _softmax_of(steps: dict[str, torch.Tensor]) -> torch.Tensor:
    """The softmax the statistics describe: the pattern, or a differential pair's first softmax."""
    parts = steps.get("pattern_parts")
    return steps["pattern"] if parts is None else parts[:, 0]


def _thumbnailed(steps: dict[str, torch.Tensor]) -> torch.Tensor:
    """What a thumbnail max-pools: the pattern, or a differential pair's |pattern| (it can be negative)."""
    return steps["pattern"] if steps.get("pattern_parts") is None else steps["pattern"].abs()


def _index(heads: list[int], nh: int, device) -> torch.Tensor | None:
    """The heads as an index tensor, or None when they are all heads in order (then no copy)."""
    return None if heads == list(range(nh)) else torch.tensor(heads, dtype=torch.long, device=device)


def _pick(x: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """(nh, ...) -> (H, ...): the selected heads."""
    return x if index is None else x.index_select(0, index)


def _write_block(full: dict, block: dict, q0: int, q1: int, s: int, masked: torch.Tensor) -> None:
    """Each full-size matrix of ``full`` (name -> tensor) gets its rows ``q0:q1`` (keys ``:s``) from ``block``."""
    for name, out in full.items():
        if name in ROW_FIELDS:
            out[:, q0:q1] = block[name].float()
        elif name in PART_FIELDS:
            out[:, :, q0:q1, :s] = block[name].float()
        else:
            out[:, q0:q1, :s] = _shown(name, block[name], masked)


def _blank(name: str, H: int, T: int, S: int, device) -> torch.Tensor:
    """What a matrix holds where no block wrote: NaN for scores (masked), 0 for weights."""
    return torch.full((H, T, S), float("nan") if name in SCORE_FIELDS else 0.0, device=device)


def _shown(name: str, x: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """A block of a matrix as the answer shows it: scores NaN where masked, weights as they are.
    The NaNs come from adding a (t, s) bias of 0 and NaN: ``masked_fill`` with a mask broadcast
    over the heads is 8× slower on the CPU (torch 2.13)."""
    x = x.float()
    if name not in SCORE_FIELDS:
        return x
    return x + torch.zeros(masked.shape, device=x.device).masked_fill_(masked, float("nan"))
