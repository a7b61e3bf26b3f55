"""A head atlas's numbers on the model's device: each block of query rows reduced to per-head statistics.

:class:`AtlasSink` is a *blockwise* trace sink (:func:`model.trace.traced_attention`): a forward
pass of a batch of windows hands it each attention layer a block of query rows at a time, and
it reduces the block, on the model's device, to what the atlas keeps of it: per metric
(:data:`~.metrics.METRICS`, defined in :mod:`.metrics`) and head the sum and sum of squares of the
row values (float64), a histogram over fixed bins and the block's top rows. Nothing of a block's
``(B, nh, t, s)`` pattern outlives the block. :meth:`AtlasSink.tally` brings a batch's sums to the
host as a :class:`~.metrics.Tally`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from ..blocks import BLOCK_TEMPORARIES, block_budget
from ..families import BIAS
from .keys import sortable, unsortable
from .metrics import BIN_EDGES, CONTEXT_AFTER, CONTEXT_BEFORE, METRICS, N_BINS, NO_WINDOW, Tally, first_rows

# query rows per block: on the CPU 64 (at most CPU_BLOCK_BYTES of float32 pattern; the block stays in cache; a whole
# layer and blocks of 16 rows both ran about 1.5x slower on 2 cores), on a GPU as many as block_budget allows (at
# least GPU_BLOCK_BYTES a temporary)
CPU_BLOCK_ROWS = 64
CPU_BLOCK_BYTES = 32 << 20
GPU_BLOCK_BYTES = 64 << 20
NO_ROW = np.iinfo(np.int64).min  # the top-rows key of a row that may not be an exemplar (an empty slot)
LOCAL_DIAGONALS = 32  # up to this w, ``local_fraction`` sums w diagonals of the pattern; above, one masked pass


def _inner_edges(device, metrics=METRICS) -> list[torch.Tensor]:
    """Each metric's inner bin edges as a float32 tensor (what ``torch.bucketize`` compares with)."""
    return [torch.tensor(BIN_EDGES[m][1:-1], dtype=torch.float32, device=device) for m in metrics]


def _diagonal(p: torch.Tensor, q0: int, back: int) -> torch.Tensor:
    """p[t, t − back] for the block's rows t = q0 .. q0 + t − 1 (0 where t − back < 0):
    (B, nh, t, s) -> (B, nh, t)."""
    d = torch.diagonal(p, offset=q0 - back, dim1=-2, dim2=-1)  # rows from back − q0 when q0 < back
    missing = p.shape[-2] - d.shape[-1]
    return F.pad(d, (missing, 0)) if missing else d


def _sum_device(dev: torch.device) -> torch.device:
    """Where a layer's float64 sums live: its device, or the host on one without float64 (MPS)."""
    return torch.device("cpu") if dev.type == "mps" else dev


@dataclass
class _Layer:
    """One layer's sums over the blocks of one batch, on the device."""

    layer: int
    T: int
    has_sink: bool
    q: torch.Tensor | None  # (B, nh, T, hs) float32
    keys: torch.Tensor | None  # (B, nh, S, hs + 2) float32: each key, then 1, then its index j
    divisor: float | None  # the scores are raw / divisor on visible keys; None: not so (softcapped)
    total: torch.Tensor  # (M, nh) float64
    squares: torch.Tensor  # (M, nh) float64
    hist: torch.Tensor  # (M, nh · N_BINS) int64
    rows: np.ndarray | None = None  # (M,) int64 query rows counted per metric (each head the same)
    top: torch.Tensor | None = None  # (M, nh, k) int64 composite keys: value, then the earlier row


class AtlasSink:
    """A blockwise trace sink that reduces every attention layer of a batch to per-head statistics."""

    blockwise = True
    needs_unscaled = False  # the metrics need the pattern only
    metrics = METRICS  # what :meth:`_values` gives, in order (the pattern's own need its queries and keys)

    def __init__(self, n_head: int, local_window: int = 8, exemplars: int = 8, shown: np.ndarray | None = None):
        """``shown``: (B, T) bool, the rows whose context may be shown as an exemplar (None: all)."""
        self.n_head, self.local_window, self.k = n_head, int(local_window), int(exemplars)
        self.first = first_rows(local_window)
        self.shown = None if shown is None else torch.from_numpy(np.asarray(shown, dtype=bool))
        self.done: list[_Layer] = []
        self._layer: _Layer | None = None
        self._B, self._device = 1, torch.device("cpu")
        self._edges: list[torch.Tensor] | None = None

    def wants(self, layer: int) -> bool:
        """Every attention layer runs the explicit path: every one is measured."""
        return True

    def blocks(self, T: int, S: int, nh: int) -> list[tuple[int, int]]:
        """The query blocks ``[(q0, q1), ...]`` (see :data:`CPU_BLOCK_ROWS`)."""
        row_bytes = self._B * nh * S * 4
        if self._device.type == "cpu":
            rows = max(1, min(CPU_BLOCK_ROWS, CPU_BLOCK_BYTES // row_bytes))
        else:
            budget = block_budget(self._device, GPU_BLOCK_BYTES * BLOCK_TEMPORARIES)
            rows = max(1, budget // (row_bytes * BLOCK_TEMPORARIES))
        return [(q0, min(T, q0 + rows)) for q0 in range(0, T, rows)]

    def begin(self, layer, q, k, v, mask, divisor, softcap=None, window=None, sink_logit=None, extras=frozenset(), **_):
        B, nh, T = q.shape[0], q.shape[1], mask.shape[0]
        self._B, self._device = B, q.device
        dev = q.device
        if self._edges is None or self._edges[0].device != dev:
            self._edges = _inner_edges(dev, self.metrics)
        M = len(self.metrics)
        S = k.shape[2]
        j = torch.arange(S, device=dev, dtype=torch.float32).view(1, 1, S, 1).expand(B, nh, S, 1)
        own = self.metrics is METRICS
        self._layer = _Layer(
            layer=layer,
            T=T,
            has_sink=sink_logit is not None,
            q=q.float() if own else None,
            keys=torch.cat([k.float(), torch.ones_like(j), j], dim=-1) if own else None,
            # scores raw / divisor: the entropy from q · (Σ p·k); capped or shifted by a position bias (T5): not
            divisor=float(divisor) if softcap is None and BIAS not in extras else None,
            # float64 sums where the device has float64 (Apple's MPS has none: the host sums there)
            total=torch.zeros(M, nh, dtype=torch.float64, device=_sum_device(dev)),
            squares=torch.zeros(M, nh, dtype=torch.float64, device=_sum_device(dev)),
            hist=torch.zeros(M, nh * N_BINS, dtype=torch.int64, device=dev),
            rows=np.zeros(M, dtype=np.int64),
        )
        if self.shown is not None and self.shown.device != dev:
            self.shown = self.shown.to(dev)

    def block(self, q0: int, q1: int, steps: dict) -> None:
        """Rows ``q0 .. q1`` of the pattern ``(B, nh, t, s)``: their metrics summed, binned and ranked.

        Few passes over the block, none with a logarithm per entry: one product of the pattern with
        the layer's keys, extended by a column of ones and one of key indices, gives each row's
        mass Σp, Σp·j (so distance = t·Σp − Σp·j) and, with two row maxima, the entropy
        (:meth:`_entropy`); the rest are a few diagonals of the pattern."""
        start = 1 if q0 == 0 else 0  # the window's row 0 sees only itself: left out
        if q1 - q0 - start <= 0:
            return
        self._reduce(self._values(q0, q1, steps)[..., start:], q0 + start, q1)

    def _values(self, q0: int, q1: int, steps: dict) -> torch.Tensor:
        """The block's row values of every metric, (M, B, nh, t)."""
        st = self._layer
        p = steps["pattern"].float()
        s = p.shape[-1]
        # one product gives, per row, Σ p·k (whence Σ p·(q·k)), the mass Σ p and Σ p·j
        sums = p @ st.keys[:, :, :s]  # (B, nh, t, hs + 2)
        mass = sums[..., -2]
        position = torch.arange(q0, q1, device=p.device, dtype=p.dtype)  # (t,)
        sink = steps.get("sink_mass")
        return torch.stack(
            [
                p[..., 0],
                sink.float() if sink is not None else torch.zeros_like(mass),
                _diagonal(p, q0, 1),
                _diagonal(p, q0, 0),
                self._entropy(p, steps["attn_scores"].float(), mass, st, q0, q1, sums[..., :-2]),
                position * mass - sums[..., -1],
                self._local(p, q0),
            ]
        )

    def begin_rows(self, layer: int, T: int, B: int, nh: int, device) -> None:
        """A layer measured from its rows of p alone (:meth:`rows`): an implicit head's |M| normalised per row
        (:mod:`.implicit`), with no queries, keys, scores or sinks."""
        self._B, self._device = B, torch.device(device)
        if self._edges is None or self._edges[0].device != self._device:
            self._edges = _inner_edges(self._device, self.metrics)
        M, where = len(self.metrics), _sum_device(self._device)
        self._layer = _Layer(
            layer=layer, T=T, has_sink=False, q=None, keys=None, divisor=None,
            total=torch.zeros(M, nh, dtype=torch.float64, device=where),
            squares=torch.zeros(M, nh, dtype=torch.float64, device=where),
            hist=torch.zeros(M, nh * N_BINS, dtype=torch.int64, device=self._device), rows=np.zeros(M, dtype=np.int64),
        )
        if self.shown is not None and self.shown.device != self._device:
            self.shown = self.shown.to(self._device)

    def rows(self, q0: int, q1: int, p: torch.Tensor) -> None:
        """Rows ``q0 .. q1`` of p ``(B, nh, t, s)``, each metric of :data:`~.metrics.METRICS` computed on p
        itself (entropy as −Σ p ln p), summed, binned and ranked as :meth:`block` does."""
        start = 1 if q0 == 0 else 0
        if q1 - q0 - start <= 0:
            return
        j = torch.arange(p.shape[-1], device=p.device, dtype=p.dtype)
        position = torch.arange(q0, q1, device=p.device, dtype=p.dtype)
        values = torch.stack(
            [p[..., 0], torch.zeros_like(p[..., 0]), _diagonal(p, q0, 1), _diagonal(p, q0, 0),
             -torch.xlogy(p, p).sum(-1), position * p.sum(-1) - p @ j, self._local(p, q0)]
        )
        self._reduce(values[..., start:], q0 + start, q1)

    def _reduce(self, values: torch.Tensor, r0: int, q1: int) -> None:
        """Rows ``r0 .. q1``'s values (M, B, nh, t') summed, binned and ranked into the layer's sums."""
        st = self._layer
        M, B, nh = values.shape[:3]
        dev = values.device
        values = values + 0.0  # -0.0 -> +0.0, so that a value has one sortable key
        pos = torch.arange(r0, q1, device=dev)
        counted_host = np.arange(r0, q1) >= np.asarray(self.first)[:, None]  # (M, t'): rows measured
        counted = torch.from_numpy(counted_host).to(dev)
        st.rows += B * counted_host.sum(-1)
        wide = values.to(st.total.device).double() * counted.to(st.total.device)[:, None, None, :]
        st.total += wide.sum((1, 3))
        st.squares += (wide * wide).sum((1, 3))
        offsets = (torch.arange(nh, device=dev) * N_BINS)[None, :, None]  # (1, nh, 1)
        for m in range(M):
            bins = torch.bucketize(values[m], self._edges[m], right=True) + offsets  # (B, nh, t')
            bins = torch.where(counted[m], bins, nh * N_BINS)  # a row not measured: a bin left off
            st.hist[m] += torch.bincount(bins.flatten(), minlength=nh * N_BINS + 1)[: nh * N_BINS]
        if self.k:
            row = (torch.arange(B, device=dev)[:, None] * st.T + pos).flatten()  # (B · t',) b·T + t
            keys = sortable(values).long() * (1 << 32) + ((1 << 32) - 1 - row).view(1, B, 1, -1)
            eligible = counted[:, None, None, :].expand(M, B, 1, pos.numel())
            if self.shown is not None:
                eligible = eligible & self.shown[:, r0:q1][None, :, None, :]
            keys = torch.where(eligible, keys, NO_ROW)
            keys = keys.permute(0, 2, 1, 3).reshape(M, nh, -1)  # (M, nh, B · t')
            if st.top is not None:
                keys = torch.cat([st.top, keys], dim=-1)
            st.top = keys.topk(min(self.k, keys.shape[-1]), dim=-1).values

    def end(self, z) -> None:
        self.done.append(self._layer)
        self._layer = None

    @staticmethod
    def _entropy(p, scores, mass, st: _Layer, q0: int, q1: int, pk: torch.Tensor) -> torch.Tensor:
        """−Σ p·ln p of each row, (B, nh, t, s) -> (B, nh, t), with no logarithm per entry.

        With m the row's top score x, every visible key has ln p_j = ln p_max + (x_j − m) (a learned
        sink's column, not in p, changes nothing), so −Σ p ln p = −Σp·ln p_max − (Σ p·x − m·Σp).
        Where the scores are raw / divisor, Σ p·x = q·(Σ p·k) / divisor, from the product the
        block already made (``pk``, (B, nh, t, hs)); else (softcapped scores) from the scores
        themselves, centred on m first (a masked key, -inf, enters as the lowest float, times p = 0)."""
        top = scores.amax(-1)  # (B, nh, t)
        p_max = p.amax(-1).clamp_min(torch.finfo(p.dtype).tiny)
        if st.divisor is not None:
            px = torch.linalg.vecdot(st.q[:, :, q0:q1], pk) / st.divisor - top * mass  # Σ p·(x − m)
        else:
            centred = (scores - top[..., None]).clamp_min_(torch.finfo(scores.dtype).min)
            px = torch.linalg.vecdot(p, centred)
        return -mass * p_max.log() - px

    def _local(self, p: torch.Tensor, q0: int) -> torch.Tensor:
        """Σ_{t−w<j≤t} p[t, j]: the w diagonals that end at each query, (B, nh, t, s) -> (B, nh, t)."""
        w = self.local_window
        if w > LOCAL_DIAGONALS:  # a wide band: one masked pass instead of w diagonals
            t, s = p.shape[-2:]
            back = torch.arange(q0, q0 + t, device=p.device)[:, None] - torch.arange(s, device=p.device)
            return torch.linalg.vecdot(p, ((back >= 0) & (back < w)).to(p.dtype))
        out = _diagonal(p, q0, 0).clone()
        for d in range(1, min(w, q0 + p.shape[-2])):
            out += _diagonal(p, q0, d)
        return out

    def tally(self, ids: np.ndarray, window0: int) -> Tally:
        """The batch's statistics on the host: ``ids`` (B, T) its windows' tokens, ``window0`` the
        first one's number."""
        layers, done, self.done = [st.layer for st in self.done], self.done, []
        out = Tally.empty(layers, self.n_head, self.k, self.metrics)
        sink = self.metrics.index("sink_mass") if "sink_mass" in self.metrics else None
        B, T = ids.shape
        for i, st in enumerate(done):
            out.count[i] = st.rows
            if sink is not None and not st.has_sink:
                out.count[i, sink] = 0
            out.has_sink[i] = st.has_sink
            out.sum[i] = st.total.cpu().numpy()
            out.sumsq[i] = st.squares.cpu().numpy()
            out.hist[i] = st.hist.view(len(self.metrics), self.n_head, N_BINS).cpu().numpy()
            if st.top is None:
                continue
            keys = st.top.cpu().numpy()  # (M, nh, k)
            k = keys.shape[-1]
            empty = keys == NO_ROW  # fewer eligible rows than k
            row = (1 << 32) - 1 - (keys & 0xFFFFFFFF)
            b, pos = np.where(empty, 0, row // T), np.where(empty, 0, row % T)
            out.value[i, :, :, :k] = np.where(empty, -np.inf, unsortable(keys >> 32))
            out.window[i, :, :, :k] = np.where(empty, NO_WINDOW, window0 + b)
            out.pos[i, :, :, :k] = pos
            around = pos[..., None] + np.arange(-CONTEXT_BEFORE, CONTEXT_AFTER + 1)  # (M, nh, k, C)
            inside = (around >= 0) & (around < T) & ~empty[..., None]
            out.context[i, :, :, :k] = np.where(inside, ids[b[..., None], around.clip(0, T - 1)], -1)
            if sink is not None and not st.has_sink:
                out.value[i, sink] = -np.inf
                out.window[i, sink] = NO_WINDOW
        out.tokens, out.windows, out.batches = int(B * T), int(B), 1
        return out
