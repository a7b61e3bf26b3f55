"""What ``POST /api/qk-attribution`` computes: one head's raw score split into query-side × key-side
terms (:func:`attnscope.model.causal.qk.qk_attribution`)."""

from __future__ import annotations

import time

from ....model.causal import NotSplittable
from ....model.causal.qk import qk_attribution
from ....model.causal.seq2seq import qk_pair
from ...responses import dumps
from ...schemas.qk_attribution import QKAttributionRequest
from ...service import Service
from ...subject import Prompt
from ..checks import check_attention_layer, check_index, check_position
from ..rounding import round_sig
from . import refuse_merged
from .attribution import refused


def qk_attribution_json(
    svc: Service, req: QKAttributionRequest, prompt: Prompt, started: float | None = None
) -> bytes:
    """The POST /api/qk-attribution answer: one head's raw score as query-side × key-side terms."""
    t0 = prompt.started if started is None else started
    facts = svc.loaded.facts
    ids = prompt.ids
    pair = facts.architecture == "encoder-decoder"
    encoder = facts.architecture == "encoder"  # one stack, split as an encoder-decoder's encoder
    # the keys' ids: the source's on an encoder-decoder's cross stack, else the query side's own
    keys = prompt.adds["source_ids"] if prompt.stack == "cross" else ids
    if pair:  # the stack's own layers and heads
        refuse_merged(facts, "a score's query and key terms (through its per-head q and k norms) are not worked out")
        stack = next(s for s in facts.stacks if s["name"] == prompt.stack)
        check_index(req.layer, stack["n_layer"], ("body", "layer"), "layer",
                    f"the {prompt.stack} stack has {stack['n_layer']} layers")
        n_head, what = stack["n_head"], f"the {prompt.stack} stack has {stack['n_head']} heads per layer"
    else:
        check_attention_layer(req.layer, ("body", "layer"), "layer", facts)
        n_head, what = facts.n_head, f"the model has {facts.n_head} heads per layer"
    check_index(req.head, n_head, ("body", "head"), "head", what)
    check_position(req.query, len(ids), ("body", "query"), "query")
    check_position(req.key, len(keys), ("body", "key"), "key")
    try:
        if pair:
            r = qk_pair(prompt.backend, req.layer, req.head, req.query, req.key)
        elif encoder:
            r = qk_pair(prompt.backend, req.layer, req.head, req.query, req.key, ids)
        else:
            r = qk_attribution(prompt.backend, ids, req.layer, req.head, req.query, req.key)
    except NotSplittable as exc:
        raise refused(exc) from exc
    body = {
        "score": float(round_sig(r.score)),
        "components": r.components,
        **({} if r.key_components is None else {"key_components": r.key_components}),
        "matrix": round_sig(r.matrix.numpy()).tolist(),
        **({} if r.position_bias is None else {"position_bias": float(round_sig(r.position_bias))}),
        "attn_scores": None if r.attn_scores is None else float(round_sig(r.attn_scores)),
        "query_token": prompt.tokens[req.query] if pair else svc.displays[ids[req.query]],
        "key_token": _key_tokens(prompt)[req.key] if pair else svc.displays[ids[req.key]],
        "frozen": r.frozen,
        "masked": r.masked,
        **prompt.adds,
        "timing_ms": round((time.perf_counter() - t0) * 1000, 3),
    }
    return dumps(body)


def _key_tokens(prompt: Prompt) -> list[str]:
    """An encoder-decoder's key side as the answer shows it: the source's tokens on the cross stack (a speech
    model's: the frames' times), else the query side's own."""
    return prompt.adds["source_tokens"] if prompt.stack == "cross" else prompt.tokens
