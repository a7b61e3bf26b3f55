"""``query_row`` of ``POST /api/attention``: one query's row of every head's ``pattern`` in every
attention layer, each layer's mean over its heads and the mean over every head of every layer; and a
conversation's ``span_mass``, each message's share of the last row.

:class:`RowCapture` is the request's :class:`~attnscope.model.capture.Capture` with that row kept
on the way (every layer then runs the explicit path); :func:`row_answer` lays it out. The page's
image view draws a query's weights over the image from it without computing a mean itself.
"""

from __future__ import annotations

from typing import Any

import torch

from ...model.capture import Capture, CapturePlan
from .rounding import round_sig

ROW_DIGITS = 6  # significant digits of each weight (a weight of 3e-7 stays 3e-7, not 0)


class RowCapture(Capture):
    """A :class:`Capture` that also keeps rows ``queries`` of every layer's ``pattern``, all heads, all keys."""

    def __init__(self, sel: CapturePlan, queries: list[int]) -> None:
        super().__init__(sel)
        self.queries = list(dict.fromkeys(queries))
        self._last = 1 << 30  # every layer runs the explicit path: each has the rows to keep
        self.rows: dict[int, torch.Tensor] = {}  # layer -> (n_queries, nh, S) float32
        self._row_layer: int | None = None
        self._row: torch.Tensor | None = None

    def begin(self, layer: int, q, k, v, mask, *args, **kwargs) -> None:
        super().begin(layer, q, k, v, mask, *args, **kwargs)
        self._row_layer = layer
        self._row = torch.zeros(len(self.queries), q.shape[1], mask.shape[1], device=q.device)
        self._row_mask = mask[self.queries]  # (n_queries, S)

    def block(self, q0: int, q1: int, steps: dict[str, torch.Tensor | None]) -> None:
        super().block(q0, q1, steps)
        for i, query in enumerate(self.queries):
            if q0 <= query < q1:
                p = steps["pattern"][0, :, query - q0].float()  # (nh, s)
                s = p.shape[-1]
                self._row[i, :, :s] = torch.where(self._row_mask[i, :s], p, torch.zeros((), device=p.device))

    def end(self, z: torch.Tensor) -> None:
        super().end(z)
        self.rows[self._row_layer] = self._row.cpu()
        self._row = None

    def row(self, layer: int, query: int) -> torch.Tensor:
        """Row ``query`` of every head of ``layer``: (nh, S)."""
        return self.rows[layer][self.queries.index(query)]


def row_answer(cap: RowCapture, query: int) -> dict[str, Any]:
    """``{"query", "layers": [{"layer", "heads": [head][key], "mean": [key]}], "mean": [key]}``."""
    layers = []
    every = []
    for layer in sorted(cap.rows):
        heads = cap.row(layer, query).double()
        every.append(heads)
        layers.append(
            {"layer": layer, "heads": _sig(heads), "mean": _sig(heads.mean(dim=0))},
        )
    mean = _sig(torch.cat(every).mean(dim=0)) if every else []
    return {"query": query, "layers": layers, "mean": mean}


def span_mass(cap: RowCapture, spans: list[dict[str, Any]], facts) -> list:
    """``[layer][head][span]``: the weight the last query row puts on each message's tokens; ``None`` for
    a layer without softmax attention (the model's own layer numbers)."""
    last = max(cap.queries)
    per_layer = []
    for layer in sorted(cap.rows):
        row = cap.row(layer, last).double()  # (nh, S)
        per_layer.append(_sig(torch.stack([row[:, s["start"] : s["end"]].sum(-1) for s in spans], dim=-1)))
    return facts.by_number(per_layer)


def _sig(t: torch.Tensor) -> list:
    return round_sig(t.numpy(), ROW_DIGITS).tolist()
