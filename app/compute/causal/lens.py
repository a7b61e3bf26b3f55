"""``POST /api/lens``: the top tokens of the final norm and unembedding after every block."""

from __future__ import annotations

import time

from ....model.causal.lens import Unsupported, lens
from ...images import prompt_of
from ...responses import dumps
from ...schemas.lens import LensRequest
from ...service import Service
from ..attention import top_predictions
from . import elapsed_ms, not_exact


def lens_json(svc: Service, req: LensRequest, started: float | None = None) -> bytes:
    """The POST /api/lens answer: the top tokens of the final norm and unembedding after every block."""
    t0 = time.perf_counter() if started is None else started
    prompt = prompt_of(svc, req.text, req.image)
    try:
        got = lens(prompt.backend, prompt.ids, req.top_k)
    except Unsupported as e:
        raise not_exact(e, "text") from None
    residuals = [
        {
            "after": "embed" if i == 0 else i - 1,
            "top": top_predictions(got.values[i], got.indices[i], got.lse[i], svc.displays, 1.0),
        }
        for i in range(len(got.values))
    ]
    body = {"tokens": prompt.tokens, **prompt.vision, "residuals": residuals, "timing_ms": elapsed_ms(t0)}
    return dumps(body)
