"""``POST /api/patching``: the share of the logit difference each head or residual piece restores."""

from __future__ import annotations

from ....model.causal.lens import Unsupported
from ....model.causal.patching import PatchingError, patching
from ...errors import ApiError
from ...responses import dumps
from ...schemas.patching import PatchingRequest
from ...service import Service
from ...subject import Prompt, single_stack
from ..checks import check_token_id, position_of
from ..rounding import round_sig
from . import elapsed_ms, not_exact


def patching_json(
    svc: Service, req: PatchingRequest, clean: Prompt, corrupt: Prompt, started: float | None = None
) -> bytes:
    """The POST /api/patching answer: the share of the logit difference each head or residual piece restores."""
    t0 = clean.started if started is None else started
    single_stack(svc, "activation patching")
    n = len(clean.ids)
    if len(corrupt.ids) != n:
        raise ApiError(
            422,
            f"corrupt is {len(corrupt.ids)} tokens and clean {n}: patching needs as many tokens in both",
            loc=("body", "corrupt" if req.corrupt_messages is None else "corrupt_messages"),
            type_="token_count_mismatch",
            ctx={"clean": n, "corrupt": len(corrupt.ids)},
        )
    position = position_of(req.position, n)
    check_token_id(req.token_id, "token_id", svc.loaded.facts)
    check_token_id(req.foil_id, "foil_id", svc.loaded.facts)
    try:
        got = patching(svc.loaded.backend, clean.ids, corrupt.ids, position, req.token_id, req.foil_id, req.what)
    except Unsupported as e:
        raise not_exact(e, "what") from None
    except PatchingError as e:
        raise ApiError(422, str(e), loc=("body", e.field), type_="value_error") from None
    restored = round_sig(got.restored.numpy()).tolist()
    body = {
        "tokens": clean.tokens,
        "corrupt_tokens": corrupt.tokens,
        **({"spans": clean.spans, "corrupt_spans": corrupt.spans} if clean.spans else {}),
        "position": position,
        "token_id": got.token_id,
        "token": svc.displays[got.token_id],
        "foil_id": got.foil_id,
        "foil": svc.displays[got.foil_id],
        "clean_top": [{"token_id": i, "token": svc.displays[i]} for i in got.clean_top],
        "corrupt_top": [{"token_id": i, "token": svc.displays[i]} for i in got.corrupt_top],
        "clean_diff": float(round_sig(got.clean_diff)),
        "corrupt_diff": float(round_sig(got.corrupt_diff)),
        "what": req.what,
        req.what: svc.loaded.facts.by_number(restored) if req.what == "heads" else restored,
        "timing_ms": elapsed_ms(t0),
    }
    return dumps(body)
