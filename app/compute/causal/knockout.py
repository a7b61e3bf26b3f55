"""``POST /api/knockout``: the predictions with chosen edges knocked out, and one log-probability before and after."""

from __future__ import annotations

from ....model.backends import top_logits
from ....model.causal.knockout import knockout
from ....model.causal.lens import Unsupported
from ....model.options import NoKeyLeft
from ...errors import ApiError
from ...responses import dumps
from ...schemas.knockout import KnockoutRequest
from ...service import Service
from ...subject import Prompt, target_of
from ..attention import top_predictions
from ..rounding import round_sig
from . import elapsed_ms, not_exact

KNOCKOUT_TOP_K = 5  # the predictions after a knockout, as /api/attention's default


def knockout_json(svc: Service, req: KnockoutRequest, prompt: Prompt, started: float | None = None) -> bytes:
    """The POST /api/knockout answer: the predictions with the edges knocked out, and one
    log-probability before and after."""
    t0 = prompt.started if started is None else started
    position = target_of(svc, req, prompt)
    edges = list(prompt.opts.knockout)  # the subject's edges, checked as it was resolved (app.subject.options_of)
    backend = prompt.backend
    try:
        got = knockout(backend, prompt.ids, edges, position, req.token_id)
    except Unsupported as e:
        raise not_exact(e, "edges") from None
    except NoKeyLeft as e:
        ctx = {"layer": e.layer, "head": e.head, "query": e.query}
        raise ApiError(422, str(e), loc=("body", "edges"), type_="no_key_left", ctx=ctx) from None
    values, indices, lse = top_logits(backend, got.hidden, KNOCKOUT_TOP_K, 1.0)
    body = {
        "tokens": prompt.tokens,
        **prompt.adds,
        "position": position,
        "token_id": got.token_id,
        "token": svc.displays[got.token_id],
        "logprob_before": float(round_sig(got.logprob_before)),
        "logprob_after": float(round_sig(got.logprob_after)),
        "predictions": top_predictions(values, indices, lse, svc.displays, 1.0),
        "timing_ms": elapsed_ms(t0),
    }
    return dumps(body)
