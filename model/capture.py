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
* ``focus``: every asked-for field of one head, at full resolution, pooled, or a region
  (:class:`model.focus.FocusHead` keeps it on the device).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .blocks import blank, block_budget, head_index, pick, query_blocks, softmax_of, thumbnailed, write_block
from .fields import PART_FIELDS, ROW_FIELDS, VECTOR_FIELDS, kept_beside, matrices_kept
from .focus import FocusHead
from .pooling import Pool, levels, thumbnail_block, thumbnails
from .stats import PART, STAT_SCALARS, StatsAccumulator


@dataclass(frozen=True)
class CapturePlan:
    """What one request wants from the forward pass."""

    layers: list[int]
    heads: list[int]  # per selected layer
    fields: frozenset[str] = frozenset()  # full matrices of every selected head
    stats: bool = False
    stats_unscaled: bool = True  # False: the selected heads' statistics leave the unscaled softmax out (the grid)
    thumbnail: int | None = None  # n: each selected head's pattern max-pooled to at most n×n
    focus: tuple[int, int] | None = None  # (layer, head) sent beside the selection
    focus_fields: frozenset[str] = frozenset()
    focus_thumbnail: int | None = None  # the focus head's matrices max-pooled to at most n×n
    focus_region: tuple[int, int, int, int] | None = None  # [q0, q1) × [k0, k1): exact cells of the focus head
    budget_bytes: int | None = None  # a block's temporaries; None: :func:`block_budget` of the layer's device
    fuse: bool = False  # the statistics' block passes compiled (:func:`model.stats.fused_block_terms`)
    implicit: tuple[int, ...] = ()  # value-linear layers whose M the answer holds (model.families.implicit)

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
        self.implicit: list = []  # model.families.implicit_layer.ImplicitLayer of sel.implicit, set by the backend
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

    def needs_unscaled_at(self, layer: int) -> bool:
        """Whether this layer's steps build the unscaled softmax: only where it is kept (a selected layer's
        ``pattern_unscaled``, the focus layer's), not in the layers before it that only feed it."""
        sel = self.sel
        return (layer in self._want and "pattern_unscaled" in sel.fields) or (
            sel.focus is not None and sel.focus[0] == layer and "pattern_unscaled" in sel.focus_fields
        )

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
            st.head_index = head_index(heads, q.shape[1], q.device)
            if sel.stats and heads:
                sinks = None if sink_logit is None else pick(sink_logit, st.head_index)
                qk = pick(st.q, st.head_index), pick(st.k, st.head_index)
                shifted = "position_bias" in extras  # T5: scores = q·kᵀ / divisor + bias
                part = PART in extras  # one block of a softmax over more keys: no unscaled softmax of its own
                st.stats = StatsAccumulator(
                    *qk, divisor, softcap, sinks, fuse=sel.fuse, shifted=shifted,
                    unscaled=sel.stats_unscaled and not part, part=part,
                )
            if sel.thumbnail and heads:
                st.pool = Pool(len(heads), T, S, thumbnail_block(T, sel.thumbnail, S), q.device)
                st.cap.thumbnail_mask = self._thumbnail_mask(mask)
            for name in matrices_kept(sel.fields, extras):
                st.full[name] = blank(name, len(heads), T, S, q.device)
            for name in kept_beside(ROW_FIELDS, sel.fields, extras):
                st.full[name] = torch.zeros(len(heads), T, device=q.device)
            for name in kept_beside(PART_FIELDS, sel.fields, extras):
                st.full[name] = torch.zeros(len(heads), 2, T, S, device=q.device)
            for name in sel.fields & set(VECTOR_FIELDS):
                self._keep(st.cap, "field", name, pick(getattr(st, name), st.head_index))
            self.layers.append(st.cap)
        if sel.focus is not None and sel.focus[0] == layer:
            layer_args = (st.q, st.k, st.v, mask, divisor, softcap, sink_logit, extras)
            asked = {"fields": sel.focus_fields, "thumbnail": sel.focus_thumbnail, "region": sel.focus_region}
            st.focus = FocusHead(sel.focus[1], *layer_args, **asked, fuse=sel.fuse)
            self.focus, self.focus_mask = {}, host_mask
            self.focus_pooled = {} if sel.focus_thumbnail else None
            self.focus_region = {} if sel.focus_region is not None else None
            if sel.focus_thumbnail:
                self.focus_pooled_mask = self._thumbnail_mask(mask, sel.focus_thumbnail)
        self._layer = st

    def block(self, q0: int, q1: int, steps: dict[str, torch.Tensor | None]) -> None:
        """Rows ``q0 .. q1`` of the layer's named steps, each ``(1, nh, q1 - q0, s)`` over its first s keys."""
        st = self._layer
        s = steps["pattern"].shape[-1]
        mask = st.mask[q0:q1, :s]  # (t, s)
        masked = ~mask
        st.n_blocks += 1
        if st.cap is not None and st.heads:
            picked = {n: pick(t[0], st.head_index) for n, t in steps.items() if t is not None}  # (H, t, s)
            if st.stats is not None:
                st.stats.add(picked["attn_scores_raw"], picked["attn_scores"], softmax_of(picked), mask)
            if st.pool is not None:
                st.pool.add(thumbnailed(picked), q0)
            write_block(st.full, picked, q0, q1, s, masked)
        if st.focus is not None:
            st.focus.block(q0, q1, steps, mask)

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
        if st.focus is not None:
            for kind, name, value in st.focus.results():
                self._keep(self, kind, name, value)

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
    focus: FocusHead | None = None  # the focus head, where it is in this layer
    n_blocks: int = 0
