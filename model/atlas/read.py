"""A head atlas on disk: its files, written (:func:`write_atlas`) and read back (:func:`read_atlas`).

An atlas is a folder:

* ``heads.parquet``: one row per (layer, head): ``layer`` (the model's own number of an attention
  layer, or of a hybrid's implicit layer, :mod:`model.atlas.implicit`), ``head``, ``implicit`` and
  ``mixer`` (the value-linear mixer's name; null for softmax heads), and per metric
  (:data:`model.atlas.metrics.METRICS`, ``divergence`` where the atlas compared a second model, then
  ``induction``) four columns: ``<metric>`` (the mean over the corpus's query rows), ``<metric>_std`` (population),
  ``<metric>_count`` (query rows measured) and ``<metric>_histogram`` (counts per bin; the edges
  are in the metadata, ``metrics.<metric>.bin_edges``). ``sink_mass`` only for a model with learned
  sinks, null in its layers without. ``induction`` is measured on its own probe
  (:data:`model.atlas.meta.DEFINITIONS`).
* ``exemplars.parquet``: per (layer, head, metric) the ``K`` query rows where the metric was
  highest, ``rank`` 0 first: ``value``, ``window`` (the window's number in the corpus),
  ``position`` (the query's position in it), ``token_id``, ``token`` (its display string),
  ``text`` (the tokens around it, decoded; cut on token and character boundaries where the
  model's tokenizer encodes it back to the same tokens: :mod:`model.atlas.text`), ``query_start``
  and ``query_end`` (the query token's characters in ``text``, its span in that encoding) and
  ``context_start`` (the window position of ``text``'s first token). A row whose context no cut
  can show (only spaces, a window's edge inside the query's character) is left out.
* ``meta.json``: the model, the corpus (files, sizes, SHA-256 hashes), the settings, how many
  tokens were seen, the metrics' definitions and bins, and ``complete`` (false for an atlas a
  Ctrl+C left, which ``--resume`` continues from ``atlas-state.npz`` beside it). The same JSON
  is in both Parquet files' schema metadata under ``attnscope.atlas``.

Files are written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .divergence import DIVERGENCE
from .implicit import layer_heads, measured
from .messages import MessageIndex
from .metrics import BIN_EDGES, CONTEXT_BEFORE, METRICS, UNIT_EDGES, Tally
from .text import cut_context

HEADS_FILE = "heads.parquet"
EXEMPLARS_FILE = "exemplars.parquet"
META_FILE = "meta.json"
META_KEY = b"attnscope.atlas"
INDUCTION = "induction"
ALL_METRICS = (*METRICS, DIVERGENCE, INDUCTION)


def _atomic_write(path: Path, write) -> None:
    """``write(tmp)`` then rename over ``path``: the file is whole or absent."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def heads_table(tally: Tally, induction: np.ndarray | None, meta: dict):
    """The ``heads.parquet`` table, one row per (layer, head); ``induction`` (La, nh, R) the probe's
    per-row values, or None. Per metric four columns: ``<metric>`` (the mean), ``<metric>_std``,
    ``<metric>_count`` and ``<metric>_histogram`` (its bins' edges are in the metadata); null where
    the metric was not measured (``sink_mass`` in a layer without sinks)."""
    import pyarrow as pa

    mean, std = tally.mean(), tally.std()
    metrics = [m for m in tally.metrics if m != "sink_mass" or any(tally.has_sink)]
    metrics += [INDUCTION] if induction is not None else []
    heads, mixers = layer_heads(meta), {m["layer"]: m["mixer"] for m in measured(meta)}
    cols: dict[str, list] = {"layer": [], "head": [], "implicit": [], "mixer": []}
    for metric in metrics:
        for suffix in ("", "_std", "_count", "_histogram"):
            cols[metric + suffix] = []
    for li, layer in enumerate(tally.layers):
        for h in range(heads.get(layer, tally.n_head)):
            cols["layer"].append(layer)
            cols["head"].append(h)
            cols["implicit"].append(layer in mixers)
            cols["mixer"].append(mixers.get(layer))
            for metric in metrics:
                if metric == INDUCTION:
                    values = induction[li, h].astype(np.float64)
                    hist = np.bincount(_unit_bins(induction[li, h]), minlength=len(UNIT_EDGES) - 1).tolist()
                    cells = (float(values.mean()), float(values.std()), values.size, hist)
                elif metric == "sink_mass" and not tally.has_sink[li]:
                    cells = (None, None, 0, None)
                else:
                    m = tally.metrics.index(metric)
                    nb = len(BIN_EDGES[metric]) - 1
                    cells = (float(mean[li, m, h]), float(std[li, m, h]), int(tally.count[li, m]),
                             tally.hist[li, m, h, :nb].tolist())
                for suffix, value in zip(("", "_std", "_count", "_histogram"), cells):
                    cols[metric + suffix].append(value)
    types = {"": pa.float64(), "_std": pa.float64(), "_count": pa.int64(), "_histogram": pa.list_(pa.int64())}
    fields = [("layer", pa.int32()), ("head", pa.int32()), ("implicit", pa.bool_()), ("mixer", pa.string())]
    fields += [(m + suffix, kind) for m in metrics for suffix, kind in types.items()]
    schema = pa.schema(fields, metadata={META_KEY: json.dumps(meta).encode()})
    return pa.table(cols, schema=schema)


def _unit_bins(values: np.ndarray) -> np.ndarray:
    inner = np.asarray(UNIT_EDGES[1:-1], dtype=np.float32)
    return np.searchsorted(inner, values.astype(np.float32).ravel(), side="right")


def exemplars_table(tally: Tally, tokenizer, meta: dict, messages: MessageIndex | None = None):
    """The ``exemplars.parquet`` table: each kept row with its context cut and decoded
    (:func:`model.atlas.text.cut_context`); a row no cut can show is left out. Over conversations
    (``messages``), each row says the conversation, message and role its query sits in (null in markup
    or a text)."""
    import pyarrow as pa

    names = ("layer", "head", "metric", "rank", "value", "window", "position", "token_id", "token", "text",
             "query_start", "query_end", "context_start", "conversation", "message", "role")
    seq_len = meta["settings"]["seq_len"]
    cols: dict[str, list] = {k: [] for k in names}
    heads = layer_heads(meta)
    for li, layer in enumerate(tally.layers):
        for m, metric in enumerate(tally.metrics):
            for h in range(heads.get(layer, tally.n_head)):
                for rank in range(tally.k):
                    value = tally.value[li, m, h, rank]
                    if not np.isfinite(value) and value < 0:  # an empty slot (or no sinks in this layer)
                        continue
                    full = tally.context[li, m, h, rank]
                    ctx = [int(i) for i in full if i >= 0]
                    q = int((full[:CONTEXT_BEFORE] >= 0).sum())
                    cut = cut_context(tokenizer, ctx, q)
                    if cut is None:
                        continue
                    pos, window = int(tally.pos[li, m, h, rank]), int(tally.window[li, m, h, rank])
                    found = messages.find(window * seq_len + pos) if messages and messages.starts else None
                    for name, v in zip(names, (
                        layer, h, metric, rank, float(value), window, pos, ctx[q],
                        _display(tokenizer, ctx[q]), cut.text, cut.query_start, cut.query_end,
                        pos - (q - cut.first), *(found or (None, None, None)),
                    )):
                        cols[name].append(v)
    types = [pa.int32(), pa.int32(), pa.string(), pa.int32(), pa.float32(), pa.int64(), pa.int32(), pa.int64(),
             pa.string(), pa.string(), pa.int32(), pa.int32(), pa.int32(), pa.int64(), pa.int32(), pa.string()]
    schema = pa.schema(list(zip(names, types)), metadata={META_KEY: json.dumps(meta).encode()})
    return pa.table(cols, schema=schema)


def _display(tokenizer, i: int) -> str:
    return tokenizer.display(i) if hasattr(tokenizer, "display") else tokenizer.decode([i])


def write_atlas(
    out: Path, tally: Tally, induction: np.ndarray | None, meta: dict, tokenizer, messages: MessageIndex | None = None
) -> None:
    """Write (or replace) the atlas files in ``out``, each atomically (``messages``: where a conversation
    corpus's messages fall, for the exemplars)."""
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    heads = heads_table(tally, induction, meta)
    exemplars = exemplars_table(tally, tokenizer, meta, messages)
    _atomic_write(out / HEADS_FILE, lambda p: pq.write_table(heads, p))
    _atomic_write(out / EXEMPLARS_FILE, lambda p: pq.write_table(exemplars, p))
    _atomic_write(out / META_FILE, lambda p: p.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8"))


# ------------------------------------------------------------------ reading


@dataclass
class Atlas:
    """An atlas as plain Python and numpy. Row ``i`` of every ``(La, nh)`` array is the model's
    layer ``layers[i]`` (attention layers and a hybrid's implicit ones; ``nh`` the most heads of any, a
    layer's missing heads NaN); a metric not measured in a layer (``sink_mass`` without
    sinks) is NaN in ``maps`` and ``std``, 0 in ``counts`` and histograms."""

    path: Path
    meta: dict
    layers: list[int]
    n_head: int
    maps: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> (La, nh) float64 means
    std: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> (La, nh) float64
    counts: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> (La, nh) int64
    histograms: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> (La, nh, bins) int64
    bin_edges: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> (bins + 1,) float64
    # (layer, head) -> metric -> rows
    exemplars: dict[tuple[int, int], dict[str, list[dict]]] = field(default_factory=dict)

    @property
    def metrics(self) -> list[str]:
        return [m for m in ALL_METRICS if m in self.maps]

    def head(self, layer: int, head: int) -> dict:
        """Everything about one head: per metric its mean, std, count, histogram and exemplars."""
        i = self.layers.index(layer)
        return {
            m: {
                "mean": float(self.maps[m][i, head]),
                "std": float(self.std[m][i, head]),
                "count": int(self.counts[m][i, head]),
                "histogram": self.histograms[m][i, head].tolist(),
                "bin_edges": self.bin_edges[m].tolist(),
                "exemplars": self.exemplars.get((layer, head), {}).get(m, []),
            }
            for m in self.metrics
        }


def read_atlas(path: str | Path) -> Atlas:
    """Load an atlas folder (:func:`write_atlas`); ``FileNotFoundError`` if a file is missing."""
    import pyarrow.parquet as pq

    path = Path(path)
    meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    heads = pq.read_table(path / HEADS_FILE).to_pydict()
    heads_of = layer_heads(meta)
    layers, n_head = sorted(heads_of), max(heads_of.values())
    at = {layer: i for i, layer in enumerate(layers)}
    atlas = Atlas(path=path, meta=meta, layers=layers, n_head=n_head)
    shape = (len(layers), n_head)
    for metric in (m for m in ALL_METRICS if m in heads):
        edges = np.asarray(meta["metrics"][metric]["bin_edges"], dtype=np.float64)
        atlas.bin_edges[metric] = edges
        atlas.maps[metric] = np.full(shape, np.nan)
        atlas.std[metric] = np.full(shape, np.nan)
        atlas.counts[metric] = np.zeros(shape, dtype=np.int64)
        atlas.histograms[metric] = np.zeros((*shape, len(edges) - 1), dtype=np.int64)
        for layer, head, mean, std, count, hist in zip(
            heads["layer"], heads["head"], heads[metric], heads[f"{metric}_std"], heads[f"{metric}_count"],
            heads[f"{metric}_histogram"],
        ):
            if mean is None:  # not measured in this layer
                continue
            i = at[layer]
            atlas.maps[metric][i, head], atlas.std[metric][i, head] = mean, std
            atlas.counts[metric][i, head] = count
            atlas.histograms[metric][i, head] = hist
    ex = pq.read_table(path / EXEMPLARS_FILE).to_pylist()
    for row in ex:  # written by layer, metric, head and rank
        per_head = atlas.exemplars.setdefault((row["layer"], row["head"]), {})
        per_head.setdefault(row["metric"], []).append(
            {k: v for k, v in row.items() if k not in ("layer", "head", "metric")}
        )
    return atlas
