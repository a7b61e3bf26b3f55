"""What ``POST /api/head-effects`` computes: for one position and one target token, the change in
log-probability when each head alone is switched off (:func:`attnscope.model.ablation.head_effects`)."""

from __future__ import annotations

import time

import numpy as np

from ...model.ablation import head_effects
from ..errors import ApiError
from ..responses import dumps
from ..schemas.effects import HeadEffectsRequest
from ..service import Service
from ..subject import Prompt, target_of
from .rounding import round_sig


def head_effects_json(svc: Service, req: HeadEffectsRequest, prompt: Prompt, started: float | None = None) -> bytes:
    """The POST /api/head-effects answer: every head switched off alone, in batched passes."""
    t0 = prompt.started if started is None else started
    facts = svc.loaded.facts
    position = target_of(svc, req, prompt)
    ids = prompt.adds.get("target_ids", prompt.ids)  # an encoder-decoder: the target, whichever the stack
    if facts.differential and req.ablation == "mean":
        raise ApiError(
            422,
            "ablation 'mean' is not defined for differential attention (a pair's two softmaxes are combined and "
            "normalised before o_proj): use 'zero'",
            loc=("body", "ablation"),
        )
    eff = head_effects(prompt.backend, ids, position, req.token_id, mode=req.ablation, base=prompt.opts)
    body = {
        "position": eff.position,
        "token_id": eff.token_id,
        "token": svc.displays[eff.token_id],
        "logprob": float(round_sig(eff.logprob)),
        "prob": float(round_sig(np.exp(eff.logprob))),
        "ablation": req.ablation,
        "ablate": [{"layer": ref.layer, "head": ref.head} for ref in req.ablate],
        "delta": facts.by_number(round_sig(eff.delta.numpy()).tolist()),
        **(
            {
                "implicit": [
                    {"layer": layer, "mixer": facts.layers[layer]["type"], "delta": round_sig(values.numpy()).tolist()}
                    for layer, values in eff.implicit.items()
                ]
            }
            if eff.implicit
            else {}
        ),
        **prompt.adds,
        "timing_ms": round((time.perf_counter() - t0) * 1000, 3),
    }
    return dumps(body)
