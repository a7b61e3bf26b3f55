"""``POST /api/compare-texts``: one head on two texts, and where they have the same number of
tokens, the difference of the two patterns cell by cell (for instance "The doctor said she" and
"The doctor said he": the same positions, one token changed)."""

from __future__ import annotations

import time

import numpy as np

from ..errors import ApiError
from ..responses import dumps
from ..schemas.attention import AttentionRequest
from ..schemas.texts import CompareTextsRequest
from ..service import Service
from .attention import compute_attention
from .rounding import PATTERN_DECIMALS


def _one(svc: Service, req: CompareTextsRequest, text: str, field: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The head on one text: tokens, its layer's mask and the pattern; errors name ``field``."""
    # built, not validated again: the route checked the text against the server's own limit
    body = AttentionRequest.model_construct(
        text=text,
        layers=[req.layer],
        heads=[req.head],
        include=["pattern"],
        top_k=0,
        causal=req.causal,
        scale=req.scale,
        ablate=req.ablate,
    )
    try:
        result = compute_attention(svc, body)
    except ApiError as e:
        for item in e.detail:  # the text at fault is this one; "layers" and "heads" are the request's "layer" and "head"
            loc = list(item["loc"])
            if loc[:2] == ["body", "text"]:
                item["loc"] = ["body", field, *loc[2:]]
                item["msg"] = item["msg"].replace("text is", f"{field} is", 1)
            elif loc[:2] in (["body", "layers"], ["body", "heads"]):
                item["loc"] = ["body", loc[1].removesuffix("s")]
                item["msg"] = item["msg"].replace(f"{loc[1]}[0]", loc[1].removesuffix("s"))
        raise
    lc = result.capture.layers[0]
    return [svc.displays[i] for i in result.token_ids], lc.mask, lc.fields["pattern"][0]


def compare_texts_json(svc: Service, req: CompareTextsRequest, started: float | None = None) -> bytes:
    t0 = time.perf_counter() if started is None else started
    a = _one(svc, req, req.text, "text")
    b = _one(svc, req, req.text_b, "text_b")
    difference = max_abs = why = None
    if len(a[0]) == len(b[0]):
        diff = np.round(b[2].astype(np.float64) - a[2].astype(np.float64), PATTERN_DECIMALS)
        difference, max_abs = diff, float(np.abs(diff).max())
    else:
        why = (
            f"the texts have {len(a[0])} and {len(b[0])} tokens: a cell of one is no cell of the other "
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
