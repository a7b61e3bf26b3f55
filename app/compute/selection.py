"""``POST /api/selection``: several tokens at once (BertViz #125, CircuitsVis #64). On the query
side, the selected queries' rows of one head's pattern summed or averaged: where they look
together; on the key side, the selected keys' columns: who looks at them."""

from __future__ import annotations

import time

import numpy as np

from ..responses import dumps
from ..schemas.selection import SelectionRequest
from ..service import Service
from ..subject import Prompt
from .checks import check_position
from .onehead import marks, one_head
from .rounding import PATTERN_DECIMALS


def selection_json(svc: Service, req: SelectionRequest, prompt: Prompt, started: float | None = None) -> bytes:
    t0 = prompt.started if started is None else started
    result, fields = one_head(svc, req, prompt, ["pattern"])
    pattern = fields["pattern"].astype(np.float64)  # (T, S): S keys, an encoder-decoder's cross stack's the source
    for side, n in (("queries", pattern.shape[0]), ("keys", pattern.shape[1])):
        for i, position in enumerate(getattr(req, side)):
            check_position(position, n, ("body", side, i), f"{side}[{i}]")
    combine = np.mean if req.reduce == "mean" else np.sum
    queries, keys = sorted(set(req.queries)), sorted(set(req.keys))
    body = {
        "tokens": [svc.displays[i] for i in result.token_ids],
        **marks(result),
        "layer": req.layer,
        "head": req.head,
        "reduce": req.reduce,
        "queries": queries,
        "keys": keys,
        "from_queries": np.round(combine(pattern[queries], axis=0), PATTERN_DECIMALS) if queries else None,
        "to_keys": np.round(combine(pattern[:, keys], axis=1), PATTERN_DECIMALS) if keys else None,
        "timing_ms": round((time.perf_counter() - t0) * 1000, 3),
    }
    return dumps(body)
