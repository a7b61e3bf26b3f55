"""What ``POST /api/qk-attribution`` computes: one head's raw score split into query-side × key-side
terms (:func:`attnscope.model.causal.qk.qk_attribution`)."""

from __future__ import annotations

import time

from ....model.causal import NotSplittable
from ....model.causal.qk import qk_attribution
from ...responses import dumps
from ...schemas.qk_attribution import QKAttributionRequest
from ...service import Service
from ...subject import Prompt, single_stack
from ..checks import check_attention_layer, check_index, check_position
from ..rounding import round_sig
from .attribution import refused


def qk_attribution_json(
    svc: Service, req: QKAttributionRequest, prompt: Prompt, started: float | None = None
) -> bytes:
    """The POST /api/qk-attribution answer: one head's raw score as query-side × key-side terms."""
    t0 = prompt.started if started is None else started
    facts = svc.loaded.facts
    single_stack(svc, "QK attribution")
    ids = prompt.ids
    check_attention_layer(req.layer, ("body", "layer"), "layer", facts)
    what = f"the model has {facts.n_head} heads per layer"
    check_index(req.head, facts.n_head, ("body", "head"), "head", what)
    for name in ("query", "key"):
        check_position(getattr(req, name), len(ids), ("body", name), name)
    try:
        r = qk_attribution(prompt.backend, ids, req.layer, req.head, req.query, req.key)
    except NotSplittable as exc:
        raise refused(exc) from exc
    body = {
        "score": float(round_sig(r.score)),
        "components": r.components,
        "matrix": round_sig(r.matrix.numpy()).tolist(),
        "query_token": svc.displays[ids[req.query]],
        "key_token": svc.displays[ids[req.key]],
        "frozen": r.frozen,
        "masked": r.masked,
        **prompt.adds,
        "timing_ms": round((time.perf_counter() - t0) * 1000, 3),
    }
    return dumps(body)
