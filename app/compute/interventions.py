"""What ``POST /api/lens``, ``/api/knockout`` and ``/api/patching`` compute (:mod:`attnscope.model.causal`):
the request checked against the model, the model code run, the answer rounded as the other answers are.
(One module for the three, so that this folder stays within its 20 files.)"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ...model.backends import top_logits
from ...model.causal.knockout import knockout
from ...model.causal.lens import Unsupported, lens
from ...model.causal.patching import PatchingError, patching
from ...model.options import NoKeyLeft
from ..errors import ApiError
from ..responses import dumps
from ..schemas.knockout import KnockoutRequest
from ..schemas.lens import LensRequest
from ..schemas.patching import PatchingRequest
from ..service import Service
from .attention import top_predictions
from .checks import check_attention_layer, check_index, check_token_count
from .rounding import round_sig

KNOCKOUT_TOP_K = 5  # the predictions after a knockout, as /api/attention's default


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _encode(svc: Service, text: str, name: str):
    """The text's encoding, refused (naming ``name``) when empty or longer than the context."""
    enc = svc.loaded.tokenizer.encode(text)
    try:
        check_token_count(len(enc.ids), svc.loaded.facts, enc.offsets)
    except ApiError as e:
        e.detail[0]["loc"] = ["body", name]
        raise
    return enc


def _unsupported(e: Unsupported, field: str) -> ApiError:
    return ApiError(422, str(e), loc=("body", field), type_="not_exact_here")


def _position(position: int | None, n: int) -> int:
    if position is None:
        return n - 1
    check_index(position, n, ("body", "position"), "position", f"the text has {n} tokens")
    return position


def _token(token_id: int | None, name: str, svc: Service) -> None:
    if token_id is not None:
        n = svc.loaded.facts.vocab_size
        check_index(token_id, n, ("body", name), name, f"the model has {n} tokens")


def lens_json(svc: Service, req: LensRequest, started: float | None = None) -> bytes:
    """The POST /api/lens answer: the top tokens of the final norm and unembedding after every block."""
    t0 = time.perf_counter() if started is None else started
    enc = _encode(svc, req.text, "text")
    try:
        got = lens(svc.loaded.backend, enc.ids, req.top_k)
    except Unsupported as e:
        raise _unsupported(e, "text") from None
    residuals = [
        {"after": "embed" if i == 0 else i - 1, "top": top_predictions(got.values[i], got.indices[i], got.lse[i], svc.displays, 1.0)}
        for i in range(len(got.values))
    ]
    return dumps({"tokens": enc.tokens, "residuals": residuals, "timing_ms": _ms(t0)})


def _span(value: int | list[int], n: int, loc: Sequence[str | int]) -> tuple[int, int]:
    """A position or a half-open range [a, b] as (a, b), each within the text's ``n`` tokens."""
    a, b = (value, value + 1) if isinstance(value, int) else value
    name = ".".join(str(part) for part in loc[1:])
    if not a < b <= n:
        raise ApiError(
            422,
            f"{name} is {value}; a position or a range [a, b] with a < b, within the text's {n} tokens (0 to {n})",
            loc=loc,
            type_="index_out_of_range",
            ctx={"limit": n, "value": value},
        )
    return a, b


def _edges(req: KnockoutRequest, n: int, svc: Service) -> list[tuple[int, int | None, int, int, int, int]]:
    facts = svc.loaded.facts
    edges = []
    for i, edge in enumerate(req.edges):
        loc = ("body", "edges", i)
        check_attention_layer(edge.layer, (*loc, "layer"), f"edges.{i}.layer", facts)
        if edge.head is not None:
            check_index(edge.head, facts.n_head, (*loc, "head"), f"edges.{i}.head", f"the model has {facts.n_head} heads")
        q0, q1 = _span(edge.query, n, (*loc, "query"))
        k0, k1 = _span(edge.key, n, (*loc, "key"))
        edges.append((edge.layer, edge.head, q0, q1, k0, k1))
    return edges


def knockout_json(svc: Service, req: KnockoutRequest, started: float | None = None) -> bytes:
    """The POST /api/knockout answer: the predictions with the edges knocked out, and one log-probability before and after."""
    t0 = time.perf_counter() if started is None else started
    enc = _encode(svc, req.text, "text")
    position = _position(req.position, len(enc.ids))
    _token(req.token_id, "token_id", svc)
    edges = _edges(req, len(enc.ids), svc)
    backend = svc.loaded.backend
    try:
        got = knockout(backend, enc.ids, edges, position, req.token_id)
    except Unsupported as e:
        raise _unsupported(e, "edges") from None
    except NoKeyLeft as e:
        ctx = {"layer": e.layer, "head": e.head, "query": e.query}
        raise ApiError(422, str(e), loc=("body", "edges"), type_="no_key_left", ctx=ctx) from None
    values, indices, lse = top_logits(backend, got.hidden, KNOCKOUT_TOP_K, 1.0)
    body = {
        "tokens": enc.tokens,
        "position": position,
        "token_id": got.token_id,
        "token": svc.displays[got.token_id],
        "logprob_before": float(round_sig(got.logprob_before)),
        "logprob_after": float(round_sig(got.logprob_after)),
        "predictions": top_predictions(values, indices, lse, svc.displays, 1.0),
        "timing_ms": _ms(t0),
    }
    return dumps(body)


def patching_json(svc: Service, req: PatchingRequest, started: float | None = None) -> bytes:
    """The POST /api/patching answer: the share of the logit difference each head or residual piece restores."""
    t0 = time.perf_counter() if started is None else started
    clean, corrupt = _encode(svc, req.clean, "clean"), _encode(svc, req.corrupt, "corrupt")
    n = len(clean.ids)
    if len(corrupt.ids) != n:
        raise ApiError(
            422,
            f"corrupt is {len(corrupt.ids)} tokens and clean {n}: patching needs as many tokens in both",
            loc=("body", "corrupt"),
            type_="token_count_mismatch",
            ctx={"clean": n, "corrupt": len(corrupt.ids)},
        )
    position = _position(req.position, n)
    _token(req.token_id, "token_id", svc)
    _token(req.foil_id, "foil_id", svc)
    try:
        got = patching(svc.loaded.backend, clean.ids, corrupt.ids, position, req.token_id, req.foil_id, req.what)
    except Unsupported as e:
        raise _unsupported(e, "what") from None
    except PatchingError as e:
        raise ApiError(422, str(e), loc=("body", e.field), type_="value_error") from None
    restored = round_sig(got.restored.numpy()).tolist()
    body = {
        "tokens": clean.tokens,
        "corrupt_tokens": corrupt.tokens,
        "position": position,
        "token_id": got.token_id,
        "token": svc.displays[got.token_id],
        "foil_id": got.foil_id,
        "foil": svc.displays[got.foil_id],
        "clean_diff": float(round_sig(got.clean_diff)),
        "corrupt_diff": float(round_sig(got.corrupt_diff)),
        "what": req.what,
        req.what: svc.loaded.facts.by_number(restored) if req.what == "heads" else restored,
        "timing_ms": _ms(t0),
    }
    return dumps(body)
