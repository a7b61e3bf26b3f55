"""The q · k view, ``POST /api/neuron``: BertViz's neuron view on the real model. For one head, one query and one
key: ``q``, ``k`` and ``q ⊙ k`` element by element, whose sum is the raw score, then the score
softmax saw and the weight. The lesson's point (a dot product is a sum of products, and its size
grows with the head's width) made on the model's own vectors."""

from __future__ import annotations

import math
import time

import numpy as np

from ..responses import dumps
from ..schemas.qk import QkRequest
from ..service import Service
from ..subject import Prompt
from .checks import check_position
from .onehead import marks, one_head
from .rounding import PATTERN_DECIMALS, SCORE_DECIMALS


def qk_json(svc: Service, req: QkRequest, prompt: Prompt, started: float | None = None) -> bytes:
    t0 = prompt.started if started is None else started
    result, fields = one_head(svc, req, prompt, ["q", "k", "attn_scores_raw", "attn_scores", "pattern"])
    T = len(result.token_ids)
    lc = result.capture.layers[0]
    query = T - 1 if req.query is None else req.query
    check_position(query, T, ("body", "query"), "query")
    key = int(np.argmax(fields["pattern"][query])) if req.key is None else req.key
    check_position(key, T, ("body", "key"), "key")
    q, k = fields["q"][query].astype(np.float64), fields["k"][key].astype(np.float64)
    raw, scaled = float(fields["attn_scores_raw"][query, key]), float(fields["attn_scores"][query, key])
    answer = {
        "tokens": [svc.displays[i] for i in result.token_ids],
        **marks(result),
        "layer": req.layer,
        "head": req.head,
        "query": query,
        "key": key,
        "q": np.round(q, SCORE_DECIMALS),
        "k": np.round(k, SCORE_DECIMALS),
        "q_times_k": np.round(q * k, SCORE_DECIMALS),
        "attn_scores_raw": round(raw, SCORE_DECIMALS) if math.isfinite(raw) else None,  # NaN: masked
        "divisor": lc.divisor,
        "softcap": lc.softcap,
        "attn_scores": round(scaled, SCORE_DECIMALS) if math.isfinite(scaled) else None,
        "weight": round(float(fields["pattern"][query, key]), PATTERN_DECIMALS),
        "timing_ms": round((time.perf_counter() - t0) * 1000, 3),
    }
    return dumps(answer)
