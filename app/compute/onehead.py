"""One head of one text, computed as ``POST /api/attention`` computes it: what the routes that look
at a single head (``/api/neuron``, ``/api/selection``, ``/api/compare-texts``) share."""

from __future__ import annotations

from ..errors import ApiError
from ..schemas.attention import AttentionRequest
from ..service import Service
from ..subject import Prompt
from .attention import compute_attention


def one_head(svc: Service, req, prompt: Prompt, include: list[str], field: str = "text"):
    """One forward pass of ``prompt`` (the request's subject, resolved) keeping ``include`` of the head
    ``(req.layer, req.head)`` under the request's what-ifs: (the result, that head's fields).
    Errors name the request's own fields: ``field`` for the text, ``layer``, ``head``."""
    # built, not validated again: the route checked the request; its subject is ``prompt``
    body = AttentionRequest.model_construct(
        layers=[req.layer],
        heads=[req.head],
        include=include,
        top_k=0,
        causal=req.causal,
        scale=req.scale,
        ablate=req.ablate,
    )
    try:
        result = compute_attention(svc, body, prompt)
    except ApiError as e:
        for item in e.detail:  # the request names one text, one layer and one head
            loc = list(item["loc"])
            if loc[:2] == ["body", "text"] and field != "text":
                item["loc"] = ["body", field, *loc[2:]]
                item["msg"] = item["msg"].replace("text is", f"{field} is", 1)
            elif loc[:2] in (["body", "layers"], ["body", "heads"]):
                item["loc"] = ["body", loc[1].removesuffix("s")]
                item["msg"] = item["msg"].replace(f"{loc[1]}[0]", loc[1].removesuffix("s"))
        raise
    lc = result.capture.layers[0]
    return result, {name: value[0] for name, value in lc.fields.items()}


def marks(result) -> dict:
    """What the answer of a one-head route adds for its subject: ``token_kinds`` and ``spans``, a recording's
    ``audio``, ``token_timestamps`` and ``words``, where it has them."""
    names = ("token_kinds", "spans", "audio", "token_timestamps", "words")
    return {name: result.adds[name] for name in names if name in result.adds}
