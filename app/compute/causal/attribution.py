"""What ``POST /api/attribution`` computes: each component's direct contribution to one logit
(:func:`attnscope.model.causal.attribution.attribute`)."""

from __future__ import annotations

import time

from ....model.causal import NotSplittable
from ....model.causal.attribution import attribute
from ...errors import ApiError
from ...responses import dumps
from ...schemas.attribution import AttributionRequest
from ...service import Service
from ...subject import Prompt, single_stack, target_of
from ..rounding import round_sig


def refused(exc: NotSplittable) -> ApiError:
    """The 422 for a model the decompositions cannot split exactly, saying what."""
    return ApiError(422, f"this model cannot be split exactly: {exc}", loc=("body", "text"), type_="not_splittable")


def attribution_json(svc: Service, req: AttributionRequest, prompt: Prompt, started: float | None = None) -> bytes:
    """The POST /api/attribution answer: each component's direct contribution to one logit."""
    t0 = prompt.started if started is None else started
    facts = svc.loaded.facts
    single_stack(svc, "direct attribution")
    position = target_of(svc, req, prompt)
    ids = prompt.ids
    try:
        a = attribute(prompt.backend, ids, position, req.token_id)
    except NotSplittable as exc:
        raise refused(exc) from exc
    body = {
        "position": a.position,
        "token_id": a.token_id,
        "token": svc.displays[a.token_id],
        "logit": float(round_sig(a.logit)),
        "heads": facts.by_number(round_sig(a.heads.numpy()).tolist()),
        "mlps": round_sig(a.mlps.numpy()).tolist(),
        "mixers": [None if m is None else float(round_sig(m)) for m in a.mixers],
        "unsplit": a.unsplit,
        "embed": float(round_sig(a.embed)),
        "rest": float(round_sig(a.rest)),
        "frozen": a.frozen,
        "final_softcap": a.final_softcap,
        **prompt.adds,
        "timing_ms": round((time.perf_counter() - t0) * 1000, 3),
    }
    return dumps(body)
