"""The two-texts view, ``POST /api/compare-texts``: one head on two texts, and where they have the same number of
tokens, the difference of the two patterns cell by cell (for instance "The doctor said she" and
"The doctor said he": the same positions, one token changed)."""

from __future__ import annotations

import time

import numpy as np

from ..responses import dumps
from ..schemas.two_texts import TwoTextsRequest
from ..service import Service
from ..subject import Prompt
from .onehead import one_head
from .rounding import PATTERN_DECIMALS


def _one(svc: Service, req: TwoTextsRequest, prompt: Prompt, field: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The head on one text: tokens, its layer's mask and the pattern; errors name ``field``."""
    result, fields = one_head(svc, req, prompt, ["pattern"], field=field)
    mask = result.capture.layers[0].mask
    return [svc.displays[i] for i in result.token_ids], mask, fields["pattern"]


def two_texts_json(
    svc: Service, req: TwoTextsRequest, prompt: Prompt, prompt_b: Prompt, started: float | None = None
) -> bytes:
    """The answer of ``POST /api/compare-texts``: ``prompt`` is the subject (``text`` or ``messages``),
    ``prompt_b`` the subject with ``text_b`` for its text."""
    t0 = prompt.started if started is None else started
    a = _one(svc, req, prompt, "text")
    b = _one(svc, req, prompt_b, "text_b")
    difference = max_abs = why = None
    if a[2].shape == b[2].shape:  # as many tokens (an encoder-decoder's cross stack: on both sides)
        diff = np.round(b[2].astype(np.float64) - a[2].astype(np.float64), PATTERN_DECIMALS)
        difference, max_abs = diff, float(np.abs(diff).max())
    else:
        sizes = " and ".join("×".join(str(n) for n in p.shape) for p in (a[2], b[2]))
        why = (
            f"the texts' patterns are {sizes} tokens: a cell of one is no cell of the other "
            "(texts of the same length in tokens, such as one word changed, compare cell by cell)"
        )
    body = {
        "layer": req.layer,
        "head": req.head,
        "texts": [
            {"tokens": tokens, "mask": mask.astype(np.uint8), "pattern": np.round(pattern, PATTERN_DECIMALS)}
            for tokens, mask, pattern in (a, b)
        ],
        "difference": difference,
        "max_abs_difference": max_abs,
        "why_no_difference": why,
        "timing_ms": round((time.perf_counter() - t0) * 1000, 3),
    }
    return dumps(body)
