"""``POST /api/rollout``: the request checked against the model and the text, then
:func:`model.rollout.rollout_rows` in one forward pass."""

from __future__ import annotations

import time

from ...model.rollout import rollout_rows
from ..errors import ApiError
from ..responses import dumps
from ..schemas.rollout import ROLLOUT_MAX_TOKENS, RolloutRequest
from ..service import Service
from ..subject import Prompt
from .checks import check_position
from .rounding import PATTERN_DECIMALS, round_fixed


def rollout_json(svc: Service, req: RolloutRequest, prompt: Prompt, started: float | None = None) -> bytes:
    t0 = prompt.started if started is None else started
    ids = prompt.ids
    if prompt.stack == "cross":  # T×S matrices: no product of one layer's with the next's
        msg = "rollout multiplies a stack's T×T matrices layer by layer: ask the encoder or decoder stack, not cross"
        raise ApiError(422, msg, loc=("body", "stack"), type_="stack_not_square")
    if any(s["name"] == prompt.stack and s.get("merged_softmax") for s in svc.loaded.facts.stacks):
        msg = (
            f"the {prompt.stack} stack's rows are one block of a softmax shared with the source's keys "
            "(merged_softmax): a rollout of that block alone would leave out their weight on the source"
        )
        raise ApiError(422, msg, loc=("body", "stack"), type_="stack_merged")
    if len(ids) > ROLLOUT_MAX_TOKENS:
        raise ApiError(
            422,
            f"text is {len(ids)} tokens; rollout multiplies T×T matrices layer by layer and takes at most "
            f"{ROLLOUT_MAX_TOKENS} tokens",
            loc=("body", "text"),
            type_="too_many_tokens",
            ctx={"limit": ROLLOUT_MAX_TOKENS, "count": len(ids)},
        )
    position = len(ids) - 1 if req.position is None else req.position
    check_position(position, len(ids), ("body", "position"), "position")
    layers, rows = rollout_rows(prompt.backend, ids, position, req.residual, prompt.opts)
    body = {
        "tokens": [svc.displays[i] for i in ids],
        **prompt.adds,
        "position": position,
        "residual": req.residual,
        "layers": layers,
        "rollout": round_fixed(rows, PATTERN_DECIMALS),
        "timing_ms": round((time.perf_counter() - t0) * 1000, 3),
    }
    return dumps(body)
