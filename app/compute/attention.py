"""Step 2 of ``POST /api/attention``: the forward pass and the answer as Python values.

:func:`compute_attention` checks the request (:func:`~.plan.plan_capture`), runs one forward pass
with a :class:`~attnscope.model.capture.Capture` as the trace sink (it takes the statistics,
thumbnails and the selected heads' matrices inside the pass), then the predictions.
:func:`answer_of` lays the result out as the answer: the keys and values of the JSON answer, each
matrix a numpy array (float32 weights, scores with NaN where masked, uint8 masks and thumbnails),
nothing encoded yet. :func:`answer_arrays` is both in one call, with ``model``: what the notebook's
``capture`` and ``attnscope inspect`` use; the HTTP route encodes the same answer
(:func:`attention_json`: the answer computed, then encoded by :mod:`attnscope.app.encoding`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import torch

from ...model.backends import ModelFacts, top_logits
from ...model.capture import Capture, CapturePlan
from ...model.fields import MATRIX_FIELDS
from ...model.pooling import causal_levels, thumbnail_block
from ...model.stats import STAT_ROWS, STAT_SCALARS
from ..encoding import encode_answer
from ..errors import ApiError
from ..responses import dumps
from ..schemas.attention import FIELDS, AttentionRequest
from ..service import Service
from ..subject import Prompt
from .checks import check_position
from .plan import plan_capture
from .rounding import floor_sig, round_sig
from .rows import RowCapture, row_answer, span_mass


def top_predictions(
    values: torch.Tensor, indices: torch.Tensor, lse: torch.Tensor, displays: list[str], temperature: float
) -> list[list[dict[str, Any]]]:
    """The top logits ``values``/``indices`` (T, k) and ``lse = logsumexp(logits / temperature)``
    (:func:`model.backends.top_logits`) as probabilities of ``softmax(logits / temperature)``.

    Probabilities are floored to 6 significant digits, after scaling a row down in the
    (rounding-error) case where its top k would add up to more than 1: each list is sorted
    and sums to at most 1.
    """
    probs = torch.exp(values.double() / temperature - lse[:, None]).clamp_max(1.0)
    total = probs.sum(-1, keepdim=True)
    probs = torch.where(total > 1, probs / total, probs)
    p_rows = floor_sig(probs.cpu().numpy()).tolist()
    i_rows = indices.cpu().tolist()
    return [
        [{"token": displays[i], "id": i, "prob": p} for p, i in zip(p_row, i_row)]
        for p_row, i_row in zip(p_rows, i_rows)
    ]


def _predictions(svc: Service, hidden: torch.Tensor, top_k: int, temperature: float) -> list:
    """Top ``top_k`` guesses at each position (a decoder's next token, an encoder's masked-LM guess at the
    position: the backend's ``head`` decides); the LM head runs only when they are asked for
    (the all-heads grid asks for none), a chunk of positions at a time."""
    values, indices, lse = top_logits(svc.loaded.backend, hidden, top_k, temperature)
    return top_predictions(values, indices, lse, svc.displays, temperature)


@dataclass
class AttentionResult:
    """What the forward pass kept for one request, before it is laid out as the answer."""

    tokens: list[str]
    token_ids: list[int]
    offsets: list[list[int]]
    stack: str
    causal: bool
    divisor: float
    sel: CapturePlan
    capture: Capture
    predictions: list[list[dict[str, Any]]]
    adds: dict[str, Any] = field(default_factory=dict)  # the subject's token_kinds, image, spans, span_mass


def compute_attention(svc: Service, req: AttentionRequest, prompt: Prompt) -> AttentionResult:
    """One forward pass of ``req``'s subject (``prompt``, resolved with its what-ifs) keeping what ``req`` asks
    for; a 422 for what the model refuses."""
    lm = svc.loaded
    ids = prompt.ids
    sel = plan_capture(svc, req, len(ids), prompt.n_keys)
    rows = [] if req.query_row is None else [_query_row(svc, req.query_row, len(ids))]
    if prompt.spans:  # a conversation: each message's share of the last row (span_mass)
        rows.append(len(ids) - 1)
    capture = RowCapture(sel, rows) if rows else Capture(sel)
    opts = prompt.opts
    hidden = prompt.backend.hidden(ids, opts, capture)  # (T, C)
    capture.finish()
    if not capture.finite():
        raise ApiError(
            422,
            f"scale {req.scale!r} makes the scores overflow; use a number from 0.001 to 10000",
            loc=("body", "scale"),
            type_="scale_overflow",
        )
    divisor = capture.layers[0].divisor if capture.layers else opts.divisor_for(lm.facts.divisor)
    adds = dict(prompt.adds)
    if prompt.spans:
        adds["span_mass"] = span_mass(capture, prompt.spans, lm.facts)
    return AttentionResult(
        tokens=prompt.tokens,
        token_ids=ids,
        offsets=prompt.offsets,
        stack=prompt.stack,
        causal=opts.causal and prompt.stack == "decoder",  # an encoder's mask, and a cross stack's, are all True
        divisor=divisor,
        sel=sel,
        capture=capture,
        predictions=_predictions(svc, hidden, req.top_k, req.temperature) if req.top_k else [[] for _ in ids],
        adds=adds,
    )


def _query_row(svc: Service, query: int, T: int) -> int:
    """``query_row`` checked: a token of the prompt, and its rows (every head of every attention layer,
    T keys each) within the server's ``max_matrix_cells``."""
    check_position(query, T, ("body", "query_row"), "query_row")
    facts = svc.loaded.facts
    cells = len(facts.attention_layers) * facts.n_head * T
    if cells > svc.max_matrix_cells:
        raise ApiError(
            422,
            f"query_row asks for {cells:,} weights ({T} tokens × {facts.n_head} heads × "
            f"{len(facts.attention_layers)} layers); the limit is {svc.max_matrix_cells:,} per answer",
            loc=("body", "query_row"),
            type_="answer_too_large",
            ctx={"limit": svc.max_matrix_cells, "count": cells},
        )
    return query


def divisor_rule(scale: str | float, layer: int, facts: ModelFacts) -> str:
    """How a layer's divisor came about, as an expression the page puts in words: the model's own
    rule for the layer (decided by the backend, :attr:`ModelFacts.layer_divisor_rules`) under
    scale "model", ``"sqrt(head_dim)"`` under "sqrt_dk", ``"1"`` under "none", ``"scale"`` for a
    number asked for."""
    if scale == "none":
        return "1"
    if scale == "sqrt_dk":
        return "sqrt(head_dim)"
    if not isinstance(scale, str):
        return "scale"
    return facts.layer_divisor_rules[layer]


# ------------------------------------------------------------------ the answer


def answer_arrays(svc: Service, req: AttentionRequest, prompt: Prompt) -> dict[str, Any]:
    """What ``POST /api/attention`` answers for ``req``, as Python values: the JSON answer's keys and
    values (``model`` included, ``timing_ms`` not), each matrix a numpy array as the ``b64`` encoding
    sends it with precision ``f4`` (weights and scores float32, unrounded; masks and thumbnails uint8).
    ``prompt``: ``req``'s subject (:func:`attnscope.app.subject.subject_of`)."""
    result = compute_attention(svc, req, prompt)
    return {**answer_of(result, req, svc.loaded.facts), "model": orjson.loads(svc.info_json)}


def answer_of(result: AttentionResult, req: AttentionRequest, facts: ModelFacts) -> dict[str, Any]:
    """The answer without ``model`` and ``timing_ms``, in the JSON answer's key order.
    ``facts`` (the model's) name each layer's ``divisor_rule``."""
    cap, sel = result.capture, result.sel
    answer: dict[str, Any] = {
        "tokens": result.tokens,
        "token_ids": result.token_ids,
        "offsets": result.offsets,
    }
    answer |= result.adds  # token_kinds, then image (with an image) or spans and span_mass (a conversation)
    if isinstance(cap, RowCapture) and req.query_row is not None:
        answer["query_row"] = row_answer(cap, req.query_row)
    answer |= {
        "stack": result.stack,
        "causal": result.causal,
        "scale": req.scale,
        "divisor": result.divisor,
        "encoding": req.encoding,
        "ablate": [{"layer": ref.layer, "head": ref.head} for ref in req.ablate],
    }
    # the T×T masks go with T×T matrices; an answer of thumbnails has them pooled (thumbnail.mask) instead
    # thumbnails of no heads are none: such an answer is the one without `thumbnail` (its T×T mask, no pooled one)
    pooled = bool(sel.thumbnail and sel.heads)
    full_matrices = bool(sel.fields & set(MATRIX_FIELDS)) or bool(cap.focus and not sel.focus_thumbnail)
    full_masks = not pooled or full_matrices
    first = cap.layers[0] if cap.layers else None
    if first is not None and full_masks:
        answer["mask"] = first.mask.astype(np.uint8)
    if pooled and first is not None:
        block = thumbnail_block(first.mask.shape[0], sel.thumbnail, first.mask.shape[1])  # T×S: one k for both
        answer["thumbnail"] = {"size": first.thumbnail_mask.shape[0], "block": block, "mask": first.thumbnail_mask}
    answer["layers"] = []
    for lc in cap.layers:
        layer: dict[str, Any] = {
            "layer": lc.layer,
            "divisor": lc.divisor,
            "divisor_rule": divisor_rule(req.scale, lc.layer, facts),
            "softcap": lc.softcap,
            "window": lc.window,
        }
        about = facts.layers[lc.layer]
        if about.get("chunk") and result.causal:  # the chunks are in the mask only while the mask is on
            layer["chunk"] = about["chunk"]
        if lc.sink_logit is not None:
            layer["sink_logit"] = lc.sink_logit.tolist()
        if facts.differential:  # pattern = pattern_parts[0] − lambda · pattern_parts[1]
            layer["lambda"] = facts.lambdas[lc.layer]
        if lc.mask is not first.mask and not np.array_equal(lc.mask, first.mask):
            if full_masks:
                layer["mask"] = lc.mask.astype(np.uint8)
            if lc.thumbnail_mask is not None:
                layer["thumbnail_mask"] = lc.thumbnail_mask
        layer["heads"] = _heads(lc, sel.heads, req.stats_rows)
        answer["layers"].append(layer)
    answer["layers"] += [_implicit_layer(il, req.stats_rows) for il in getattr(cap, "implicit", [])]
    if "thumbnail" not in answer and any(il.thumbnail is not None for il in getattr(cap, "implicit", [])):
        answer["thumbnail"] = _implicit_thumbnail(len(result.token_ids), sel.thumbnail)
    answer["layers"].sort(key=lambda layer: layer["layer"])
    if sel.focus is not None and cap.focus is not None:
        answer["focus"] = _focus(cap, sel, len(result.token_ids))
    answer["predictions"] = result.predictions
    return answer


def _implicit_layer(il, stats_rows: bool) -> dict[str, Any]:
    """A value-linear layer: each head's ``pattern`` is M (o_t = Σ_s M[t, s] v_s + skip · v_t), not a
    softmax; its ``thumbnail`` M pooled keeping the sign (the value of largest |M| in each block), over the
    causal ``thumbnail_mask``; its ``stats`` those of |M| normalised per row (the rest null); a per-channel
    mixer's one head is the mean over channels of |M| (``per_channel``)."""
    layer: dict[str, Any] = {
        "layer": il.layer,
        "implicit": True,
        "mixer": il.mixer,
        "per_channel": il.per_channel,
        "skip": None if il.skip is None else il.skip.tolist(),
    }
    if il.thumbnail is not None:
        layer["thumbnail_mask"] = causal_levels(il.thumbnail.shape[-1])
    stats = _stats(il.stats, stats_rows) if il.stats else None
    n = next(a.shape[0] for a in (il.pattern, il.thumbnail) if a is not None)
    heads = []
    for h in range(n):
        head: dict[str, Any] = {"head": h}
        if il.thumbnail is not None:
            head["thumbnail"] = il.thumbnail[h]
        if stats is not None:
            head["stats"] = stats[h]
        if il.pattern is not None:
            head["pattern"] = il.pattern[h]
        heads.append(head)
    layer["heads"] = heads
    return layer


def _implicit_thumbnail(T: int, n: int) -> dict[str, Any]:
    """The answer's ``thumbnail`` where only implicit layers were asked: the causal mask pooled."""
    block = thumbnail_block(T, n)
    m = -(-T // block)
    return {"size": m, "block": block, "mask": causal_levels(m)}


def _heads(lc, heads: list[int], stats_rows: bool) -> list[dict[str, Any]]:
    """The selected heads of one layer: ``thumbnail`` first, then the asked-for fields in :data:`FIELDS` order."""
    stats = _stats(lc.stats, stats_rows) if lc.stats else None
    out = []
    for j, h in enumerate(heads):
        head: dict[str, Any] = {"head": h}
        if lc.thumbnail is not None:
            head["thumbnail"] = lc.thumbnail[j]
        for name in FIELDS:
            if name == "stats" and stats is not None:
                head["stats"] = stats[j]
            elif name in lc.fields:
                head[name] = lc.fields[name][j]
        out.append(head)
    return out


def _stats(stats: dict[str, np.ndarray], rows: bool) -> list[dict[str, Any]]:
    """Per head its statistics: the scalars to 6 significant digits (``None`` where not finite, as
    JSON's ``null``), then the per-row arrays when ``rows``."""
    names = [name for name in STAT_SCALARS if name in stats]  # the unscaled ones only where asked for
    scalars = round_sig(np.stack([stats[name] for name in names])).tolist()  # (S, H)
    out = []
    for j in range(len(scalars[0])):
        head = {name: v if math.isfinite(v) else None for name, v in zip(names, (s[j] for s in scalars))}
        if rows:
            head.update({name: stats[name][j] for name in STAT_ROWS if name in stats})
        out.append(head)
    return out


def _focus(cap: Capture, sel: CapturePlan, T: int) -> dict[str, Any]:
    """The focus head: its fields at full resolution, or max-pooled (with ``thumbnail``), and ``region``."""
    layer, h = sel.focus
    focus: dict[str, Any] = {"layer": layer, "head": h}
    if cap.focus_pooled is not None:
        pooled_mask = cap.focus_pooled_mask
        block = thumbnail_block(T, sel.focus_thumbnail, cap.focus_mask.shape[1])
        focus["thumbnail"] = {"size": pooled_mask.shape[0], "block": block, "mask": pooled_mask}
    for name in FIELDS:
        if name == "stats" and cap.focus_stats is not None:
            focus["stats"] = _stats({k: v[None] for k, v in cap.focus_stats.items()}, rows=True)[0]
        elif cap.focus_pooled is not None and name in cap.focus_pooled:
            focus[name] = cap.focus_pooled[name]
        elif name in cap.focus:
            focus[name] = cap.focus[name]
    if cap.focus_region is not None:
        q0, q1, k0, k1 = sel.focus_region
        region: dict[str, Any] = {"bounds": [q0, q1, k0, k1]}
        region.update({name: cap.focus_region[name] for name in FIELDS if name in cap.focus_region})
        focus["region"] = region
    return focus


def attention_json(
    svc: Service, req: AttentionRequest, prompt: Prompt, started: float | None = None
) -> tuple[bytes, dict[str, float]]:
    """The exact bytes of the POST /api/attention response, and the server timings in ms.

    ``timing_ms`` is always the last field, so two answers to the same request are
    byte-identical up to it (``body.rsplit(b',"timing_ms":', 1)[0]``). It covers resolving the subject,
    the wait for a slot, the computation and the encoding, all but the final join of the pieces.
    """
    t0 = prompt.started if started is None else started
    t1 = time.perf_counter()
    result = compute_attention(svc, req, prompt)
    t2 = time.perf_counter()
    facts = svc.loaded.facts
    by_layer = {lc.layer: lc.mask for lc in result.capture.layers}
    causal = np.tril(np.ones((len(result.token_ids),) * 2, dtype=bool))  # M is 0 after each query
    answer = answer_of(result, req, facts)
    masks = [causal if layer.get("implicit") else by_layer.get(layer["layer"], causal) for layer in answer["layers"]]
    parts = encode_answer(answer, req.precision, masks, result.capture.focus_mask, signed=facts.differential)
    t3 = time.perf_counter()
    total = (t3 - t0) * 1000
    parts += (b',"model":', svc.info_json, b',"timing_ms":', dumps(round(total, 3)), b"}")
    timings = {"queue": (t1 - t0) * 1000, "compute": (t2 - t1) * 1000, "encode": (t3 - t2) * 1000, "total": total}
    return b"".join(parts), timings
