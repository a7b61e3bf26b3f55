"""A hybrid's implicit heads in the atlas: each value-linear mixer's M (:mod:`model.families.implicit`) measured
under the page's rule for what assumes a distribution, p[t, s] = |M[t, s]| / Σ_s' |M[t, s']| (|M| normalised per
row; a row of zeros gives p = 0 everywhere), with every metric of :data:`~.metrics.METRICS` computed on p as on a
softmax row (``sink_mass``: none, as in a layer without sinks) and ``induction`` on the same probe.

The mixers record batch row 0 of a forward pass, so each window runs once more alone, inside
:func:`~model.families.implicit.recording_scans`; M comes a block of query rows at a time (never a layer's
whole (heads, T, T) at once, except on the short induction probe). A mixer that shares its layer number with
softmax heads (Falcon-H1's Mamba-2 beside attention) is not measured: the atlas's rows are (layer, head).
"""

from __future__ import annotations

import numpy as np
import torch

from ..blocks import block_budget
from .metrics import Tally

RULE = (
    "implicit heads (a value-linear mixer's M, o_t = Σ_s M[t, s] v_s) are measured on p[t, s] = |M[t, s]| / "
    "Σ_s' |M[t, s']| (|M| normalised per row, the page's rule; a row of zeros gives p = 0): every metric as on a "
    "softmax row, sink_mass none"
)
BESIDE = (
    "not measured: this mixer runs beside softmax attention under the same layer number, and the atlas's rows "
    "are (layer, head)"
)
COMPARED = "not measured: a compare model's divergence is defined for softmax rows only"


def implicit_layers(facts, compared: bool = False) -> dict | None:
    """meta.json's ``model.implicit_layers``: the value-linear layers measured (``measured``: layer, mixer,
    heads) and those skipped with the reason; None in a model without any."""
    measured, skipped = [], []
    for i, about in enumerate(facts.layers):
        if about.get("implicit") and not compared:
            measured.append({"layer": i, "mixer": about["type"], "heads": int(about["heads"])})
        elif about.get("implicit") or about.get("mixer"):
            why = COMPARED if about.get("implicit") else BESIDE
            skipped.append({"layer": i, "mixer": about.get("mixer") or about["type"], "why": why})
    if not measured and not skipped:
        return None
    return {"rule": RULE, "measured": measured, "skipped": skipped}


def measured(meta: dict) -> list[dict]:
    """The implicit layers an atlas's metadata says it measured (older atlases: none)."""
    about = meta["model"].get("implicit_layers") or {}
    return list(about.get("measured") or [])


def layer_heads(meta: dict) -> dict[int, int]:
    """Every measured layer's number -> its heads (softmax layers n_head, implicit layers their mixer's)."""
    n_head = int(meta["model"]["n_head"])
    heads = {int(layer): n_head for layer in meta["model"]["attention_layers"]}
    return heads | {int(m["layer"]): int(m["heads"]) for m in measured(meta)}


def normalised(M: torch.Tensor) -> torch.Tensor:
    """|M| normalised per row (last axis); a row of zeros stays zeros."""
    a = M.abs().float()
    total = a.sum(-1, keepdim=True)
    return a / torch.where(total > 0, total, torch.ones_like(total))


def _scans(backend, ids: np.ndarray) -> list[dict]:
    """Each window ``ids[b]`` alone through the model, its mixers' scans recorded: one dict layer -> Scan a window."""
    from ..families.implicit import recording_scans
    from ..precision import exact_fp32

    out = []
    with torch.inference_mode(), exact_fp32():
        for row in ids:
            idx = torch.from_numpy(np.ascontiguousarray(row[None])).to(backend.device)
            with recording_scans(backend.model) as scans:
                backend.trunk(input_ids=idx, **getattr(backend, "calls", {"use_cache": False}))
            out.append(dict(scans))
    return out


def implicit_tally(backend, layers: list[dict], ids: np.ndarray, window0: int, local_window: int, exemplars: int,
                   shown: np.ndarray | None) -> Tally:
    """One batch's :class:`Tally` of the implicit ``layers`` (``[{"layer", "heads", ...}]``, one head count)."""
    from .stats import AtlasSink

    heads = max(int(m["heads"]) for m in layers)
    sink = AtlasSink(heads, local_window, exemplars, shown)
    per_window = _scans(backend, ids)
    budget = block_budget(backend.device)
    with torch.inference_mode():
        for about in layers:
            scans = [w[int(about["layer"])] for w in per_window]
            T = scans[0].v.shape[1]
            sink.begin_rows(int(about["layer"]), T, len(scans), heads, scans[0].v.device)
            for parts in zip(*(s.blocks(budget // len(scans)) for s in scans)):
                r0, r1 = parts[0][0], parts[0][1]
                sink.rows(r0, r1, normalised(torch.stack([rows for _, _, rows in parts])))
            sink.end(None)
    return sink.tally(ids, window0)


def implicit_induction(backend, layers: list[dict], tokens: torch.Tensor, rows, cols, heads: int) -> np.ndarray:
    """(len(layers), heads, R): each probe row's p at the induction cells (``rows``, ``cols``), R = probe × cells."""
    from ..families.implicit_layer import implicit_layer

    out = np.zeros((len(layers), heads, tokens.shape[0], len(rows)), dtype=np.float32)
    for b, scans in enumerate(_scans(backend, tokens.numpy())):
        for i, about in enumerate(layers):
            M = implicit_layer(scans[int(about["layer"])], block_budget(backend.device)).pattern
            p = normalised(torch.from_numpy(M)).numpy()
            out[i, : p.shape[0], b] = p[:, rows, cols]
    return out.reshape(len(layers), heads, -1)


def joined(parts: list[Tally], n_head: int) -> Tally:
    """Tallies of disjoint layers as one, layers in the model's order and heads padded to ``n_head``."""
    first = parts[0]
    layers = sorted(layer for t in parts for layer in t.layers)
    out = Tally.empty(layers, n_head, first.k, first.metrics)
    for t in parts:
        for i, layer in enumerate(t.layers):
            j = layers.index(layer)
            out.has_sink[j], out.count[j] = t.has_sink[i], t.count[i]
            for name in ("sum", "sumsq", "hist", "value", "window", "pos", "context"):
                getattr(out, name)[j, :, : t.n_head] = getattr(t, name)[i]
    out.tokens, out.windows, out.batches = first.tokens, first.windows, first.batches
    return out


def shape(facts, compared: bool = False) -> tuple[list[int], list[dict], int]:
    """What the atlas measures of ``facts``'s model: every measured layer's number in order, the implicit ones
    (:func:`implicit_layers`'s ``measured``), and the most heads of any of them."""
    about = implicit_layers(facts, compared)
    implicit = about["measured"] if about else []
    layers = sorted([*facts.attention_layers, *(m["layer"] for m in implicit)])
    return layers, implicit, max([facts.n_head, *(m["heads"] for m in implicit)])
