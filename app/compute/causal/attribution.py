"""What ``POST /api/attribution`` computes: each component's direct contribution to one logit
(:func:`attnscope.model.causal.attribution.attribute`)."""

from __future__ import annotations

import time

from ....model.causal import NotSplittable
from ....model.causal.attribution import attribute
from ....model.causal.seq2seq import attribute_pair
from ...errors import ApiError
from ...responses import dumps
from ...schemas.attribution import AttributionRequest
from ...service import Service
from ...subject import Prompt, target_of
from ..rounding import round_sig
from . import refuse_merged


def refused(exc: NotSplittable) -> ApiError:
    """The 422 for a model the decompositions cannot split exactly, saying what."""
    return ApiError(422, f"this model cannot be split exactly: {exc}", loc=("body", "text"), type_="not_splittable")


def nonlinear_head(name: str) -> str:
    """Why direct attribution is not defined on an encoder's masked-LM logit."""
    return (f"direct attribution is not defined on {name}'s masked-LM logit: its head runs a dense layer, an "
            "activation and a norm before the output layer, so the logit is no sum of the components' writes; the "
            "lens reads each layer through that head (/api/lens), head effects measure each head's part in the guess")


def attribution_json(svc: Service, req: AttributionRequest, prompt: Prompt, started: float | None = None) -> bytes:
    """The POST /api/attribution answer: each component's direct contribution to one logit."""
    t0 = prompt.started if started is None else started
    facts = svc.loaded.facts
    position = target_of(svc, req, prompt)
    pair = facts.architecture == "encoder-decoder"  # the decoder's logit at a target position, whichever the stack
    if facts.architecture == "encoder":
        raise ApiError(422, nonlinear_head(facts.name), loc=("body", "stack"), type_="encoder_head_nonlinear")
    if pair:
        refuse_merged(facts, "its write cannot be split into a self head's part and a cross head's (not worked out)")
    try:
        if pair:
            a = attribute_pair(prompt.backend, position, req.token_id)
        else:
            a = attribute(prompt.backend, prompt.ids, position, req.token_id)
    except NotSplittable as exc:
        raise refused(exc) from exc
    heads = round_sig(a.heads.numpy()).tolist()
    body = {
        "position": a.position,
        "token_id": a.token_id,
        "token": svc.displays[a.token_id],
        "logit": float(round_sig(a.logit)),
        "heads": heads if pair else facts.by_number(heads),
        **({} if a.cross_heads is None else {"cross_heads": round_sig(a.cross_heads.numpy()).tolist()}),
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
