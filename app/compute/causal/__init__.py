"""What the causal routes compute (:mod:`attnscope.model.causal`), one module per route: ``lens``,
``attribution``, ``knockout``, ``patching``, ``qk_attribution``. Each checks the request against the
model, runs the model code and rounds the answer as the other answers are; the checks they share are
here."""

from __future__ import annotations

import time

from ....model.causal.lens import Unsupported
from ...errors import ApiError


def elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def refuse_merged(facts, why: str) -> None:
    """A 422 naming ``stack`` where the decoder's heads share one softmax with the source's keys
    (``merged_softmax``, T5Gemma 2): ``why`` says what the route would have to split that it cannot."""
    if any(s.get("merged_softmax") for s in facts.stacks):
        msg = ("the decoder's self and cross blocks are one softmax here (merged_softmax): each decoder head has one "
               f"output over both, so {why}")
        raise ApiError(422, msg, loc=("body", "stack"), type_="stack_merged")


def not_exact(e: Unsupported, field: str) -> ApiError:
    return ApiError(422, str(e), loc=("body", field), type_="not_exact_here")
