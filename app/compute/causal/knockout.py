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
from ..checks import check_attention_layer, check_implicit_head, check_index, check_span
from ..rounding import round_sig
from . import elapsed_ms, not_exact

KNOCKOUT_TOP_K = 5  # the predictions after a knockout, as /api/attention's default


def _edges(
    req: KnockoutRequest, n: int, svc: Service, n_keys: int | None = None
) -> list[tuple[int, int | None, int, int, int, int]]:
    """The edges checked: queries among ``n`` tokens, keys among ``n_keys`` (an encoder-decoder's cross stack:
    the source's), each layer and head the model's."""
    facts = svc.loaded.facts
    edges = []
    for i, edge in enumerate(req.edges):
        loc = ("body", "edges", i)
        about = facts.layers[edge.layer] if 0 <= edge.layer < facts.n_layer else {}
        if about.get("implicit"):  # an implicit head's edge: its term M[t, s] v_s removed from o_t
            check_knockable(edge, loc, about)
        else:
            check_attention_layer(edge.layer, (*loc, "layer"), f"edges.{i}.layer", facts)
        if edge.head is not None and not about.get("implicit"):
            check_index(
                edge.head, facts.n_head, (*loc, "head"), f"edges.{i}.head", f"the model has {facts.n_head} heads"
            )
        q0, q1 = check_span(edge.query, n, (*loc, "query"), f"edges.{i}.query")
        k0, k1 = check_span(edge.key, n_keys or n, (*loc, "key"), f"edges.{i}.key")
        edges.append((edge.layer, edge.head, q0, q1, k0, k1))
    return edges


def check_knockable(edge, loc: tuple, about: dict) -> None:
    """An edge of an implicit layer: a mixer whose scan attnscope wraps (not lightning's, not per channel)."""
    if about["type"] not in ("gated_deltanet", "kimi_delta", "mamba2"):
        raise ApiError(
            422,
            f"layer {edge.layer} is a {about['type']} layer: knocking out its edges is not built "
            "(gated_deltanet, kimi_delta and mamba2 layers only)",
            loc=(*loc, "layer"),
            type_="not_knockable",
        )
    if edge.head is not None:
        check_implicit_head(edge.layer, edge.head, loc, about)


def knockout_json(svc: Service, req: KnockoutRequest, prompt: Prompt, started: float | None = None) -> bytes:
    """The POST /api/knockout answer: the predictions with the edges knocked out, and one
    log-probability before and after."""
    t0 = prompt.started if started is None else started
    position = target_of(svc, req, prompt)
    if prompt.stack == "encoder" and svc.loaded.facts.architecture == "encoder-decoder":
        msg = ("knockout measures the decoder's guess at a target position: ask the decoder or cross stack (an "
               "encoder's edges are not knocked out yet)")
        raise ApiError(422, msg, loc=("body", "stack"), type_="stack_unsupported")
    keys = len(prompt.adds["source_ids"]) if prompt.stack == "cross" else None
    edges = _edges(req, len(prompt.ids), svc, keys)
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
