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


def not_exact(e: Unsupported, field: str) -> ApiError:
    return ApiError(422, str(e), loc=("body", field), type_="not_exact_here")
