"""What the head atlas measures, and the tally of it on the host that merges exactly.

The per-row metrics (:data:`METRICS`), for query row t of a window (rows t ≥ 1: row 0 sees only
itself, so every metric of it is fixed), with p the row's attention pattern over keys j ≤ t:

* ``first_token``: p[t, 0], the weight on the window's first token;
* ``sink_mass``: 1 − Σ_j p[t, j], the weight a learned sink took (gpt-oss); only in layers with sinks;
* ``previous_token``: p[t, t − 1];
* ``self``: p[t, t];
* ``entropy``: −Σ_j p[t, j] · ln p[t, j], in nats;
* ``mean_distance``: Σ_j p[t, j] · (t − j), the mean distance attended back, in tokens;
* ``local``: Σ_{t − w < j ≤ t} p[t, j], the weight on the w tokens ending at the query (w = ``local_window``).
With a second model, :mod:`.divergence` adds ``divergence``, the two models' rows' Jensen–Shannon
divergence in bits. A metric leaves out the rows where it is at its maximum by construction
(:func:`first_rows`); a row is an exemplar only where its context is not whitespace only (``shown``).

:class:`~.stats.AtlasSink` measures them on the model's device, a block of rows at a time; each
batch gives a :class:`Tally` (numpy). Tallies merge (:meth:`Tally.add`) by adding sums, counts and
histograms and keeping the top ``K`` rows of both under one total order (value, then window, then
position: the earlier row wins a tie), so the same batches merged in the same order give
bit-identical sums, and the exemplars do not depend on the order at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

METRICS = ("first_token", "sink_mass", "previous_token", "self", "entropy", "mean_distance", "local_fraction")
UNIT_EDGES = tuple(i / 20 for i in range(21))  # 20 bins of 0.05 over [0, 1]
BIN_EDGES = {
    **{m: UNIT_EDGES for m in ("first_token", "sink_mass", "previous_token", "self", "local_fraction")},
    "entropy": tuple(i / 4 for i in range(33)),  # 32 bins of 0.25 nats over [0, 8]
    # [0, 0.5), [0.5, 1.5), [1.5, 3.5), [3.5, 7.5), ... [32767.5, 65535.5]: about 0, 1, 2-3, 4-7, ... tokens back;
    # the edges between whole numbers, where a one-hot row's distance never falls
    "mean_distance": (0.0, *(2.0**i - 0.5 for i in range(17))),
    # two models' Jensen–Shannon divergence in bits (model.atlas.divergence): [0, 2^-20), then one bin per power of 2
    "divergence": (0.0, *(2.0**-i for i in range(20, -1, -1))),
}
N_BINS = max(len(e) - 1 for e in BIN_EDGES.values())
CONTEXT_BEFORE, CONTEXT_AFTER = 24, 4  # tokens kept around an exemplar's query
CONTEXT = CONTEXT_BEFORE + 1 + CONTEXT_AFTER
NO_WINDOW = np.iinfo(np.int64).max  # the window of an empty exemplar slot


def first_rows(local_window: int) -> tuple[int, ...]:
    """Per metric (:data:`METRICS`) the first query row it is measured on: the earlier rows are at
    their maximum by construction (``first_token``, ``previous_token``: at row 1 the previous token
    is the first, so the row cannot tell the two apart; ``local_fraction``: a row of fewer than w
    keys is all local, 1 less a sink's share)."""
    first = {"first_token": 2, "previous_token": 2, "local_fraction": max(1, int(local_window))}
    return tuple(first.get(m, 1) for m in METRICS)


def bin_index(values: np.ndarray, metric: str) -> np.ndarray:
    """The histogram bin of each float32 value, as the sink counts it (for readers and tests)."""
    inner = np.asarray(BIN_EDGES[metric][1:-1], dtype=np.float32)
    return np.searchsorted(inner, np.asarray(values, dtype=np.float32), side="right")


@dataclass
class Tally:
    """Per (attention layer, metric, head) sums, squares, counts, histograms and top-K rows, on the host.

    ``layers`` are the model's own numbers of its attention layers, in order; every array's first
    axis follows them, every second axis ``metrics``. Empty exemplar slots hold value -inf, window
    :data:`NO_WINDOW` and context -1.
    """

    layers: list[int]
    n_head: int
    k: int
    has_sink: np.ndarray  # (La,) bool
    count: np.ndarray  # (La, M) int64 rows counted (each head the same)
    sum: np.ndarray  # (La, M, nh) float64
    sumsq: np.ndarray  # (La, M, nh) float64
    hist: np.ndarray  # (La, M, nh, N_BINS) int64
    value: np.ndarray  # (La, M, nh, K) float32
    window: np.ndarray  # (La, M, nh, K) int64
    pos: np.ndarray  # (La, M, nh, K) int64
    context: np.ndarray  # (La, M, nh, K, CONTEXT) int64 token ids, -1 outside the window
    tokens: int = 0
    windows: int = 0
    batches: int = 0
    metrics: tuple[str, ...] = METRICS

    # what a state file holds
    arrays = ("has_sink", "count", "sum", "sumsq", "hist", "value", "window", "pos", "context")

    @classmethod
    def empty(cls, layers: list[int], n_head: int, k: int, metrics: tuple[str, ...] = METRICS) -> Tally:
        La, M = len(layers), len(metrics)
        shape = (La, M, n_head, k)
        return cls(
            layers=list(layers), n_head=n_head, k=k, has_sink=np.zeros(La, dtype=bool),
            count=np.zeros((La, M), dtype=np.int64), sum=np.zeros((La, M, n_head)), sumsq=np.zeros((La, M, n_head)),
            hist=np.zeros((La, M, n_head, N_BINS), dtype=np.int64), value=np.full(shape, -np.inf, dtype=np.float32),
            window=np.full(shape, NO_WINDOW, dtype=np.int64), pos=np.zeros(shape, dtype=np.int64),
            context=np.full((*shape, CONTEXT), -1, dtype=np.int64), metrics=tuple(metrics),
        )

    def add(self, other: Tally) -> None:
        """Merge ``other`` into this tally: sums, counts, histograms added; the top K of both kept."""
        if (other.layers, other.n_head, other.k, other.metrics) != (self.layers, self.n_head, self.k, self.metrics):
            raise ValueError("cannot merge tallies of different layers, heads, exemplar counts or metrics")
        merged = {}
        if self.k:
            value = np.concatenate([self.value, other.value], axis=-1)
            window = np.concatenate([self.window, other.window], axis=-1)
            pos = np.concatenate([self.pos, other.pos], axis=-1)
            order = np.lexsort((pos, window, -value), axis=-1)[..., : self.k]  # value down, then window, position
            merged = {
                "value": np.take_along_axis(value, order, -1),
                "window": np.take_along_axis(window, order, -1),
                "pos": np.take_along_axis(pos, order, -1),
                "context": np.take_along_axis(
                    np.concatenate([self.context, other.context], axis=-2), order[..., None], -2
                ),
            }
        self.has_sink, self.count = self.has_sink | other.has_sink, self.count + other.count
        self.sum, self.sumsq, self.hist = self.sum + other.sum, self.sumsq + other.sumsq, self.hist + other.hist
        for name, arr in merged.items():
            setattr(self, name, arr)
        for name in ("tokens", "windows", "batches"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Everything as named numpy arrays (a state file, a Ray result)."""
        head = {"layers": np.asarray(self.layers, dtype=np.int64), "metrics": np.asarray(self.metrics, dtype=str),
                "sizes": np.asarray([self.n_head, self.k, self.tokens, self.windows, self.batches], dtype=np.int64)}
        return head | {name: getattr(self, name) for name in self.arrays}

    @classmethod
    def from_arrays(cls, arrays) -> Tally:
        n_head, k, tokens, windows, batches = (int(x) for x in arrays["sizes"])
        metrics = tuple(str(m) for m in arrays["metrics"]) if "metrics" in arrays else METRICS  # older states: none
        out = cls.empty([int(x) for x in arrays["layers"]], n_head, k, metrics)
        for name in out.arrays:
            setattr(out, name, np.array(arrays[name]))
        short = max(N_BINS - out.hist.shape[-1], 0)  # a state from before divergence's bins: fewer, all unused
        out.hist = np.pad(out.hist, [(0, 0)] * (out.hist.ndim - 1) + [(0, short)])
        out.tokens, out.windows, out.batches = tokens, windows, batches
        return out

    def mean(self) -> np.ndarray:
        """(La, M, nh) float64; NaN where nothing was counted."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sum / self.count[..., None]

    def std(self) -> np.ndarray:
        """(La, M, nh) population standard deviation; NaN where nothing was counted."""
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self.mean()
            return np.sqrt(np.maximum(self.sumsq / self.count[..., None] - mean * mean, 0.0))
