"""Step 1 of ``POST /api/attention``: the request checked against the model and the text, made a
:class:`~attnscope.model.capture.CapturePlan` (which layers, heads and fields the forward pass keeps),
or a 422 naming the field and the limit before any computing."""

from __future__ import annotations

from ...model.capture import CapturePlan
from ...model.fields import MATRIX_FIELDS, SCORE_PARTS
from ..errors import ApiError
from ..schemas.attention import REGION_MAX, AttentionRequest
from ..service import Service
from .checks import check_head, check_token_count, indices, layer_indices


def plan_capture(svc: Service, req: AttentionRequest, n_tokens: int, n_keys: int | None = None) -> CapturePlan:
    """The request checked against the model: a :class:`CapturePlan`, or an :class:`ApiError` naming the field.
    ``n_keys``: the keys of each query row where they are not the ``n_tokens`` queries (an encoder-decoder's
    cross stack: the source's)."""
    n_keys = n_keys or n_tokens
    facts = svc.loaded.facts
    check_token_count(n_tokens, facts)
    implicit = _implicit_layers(req, facts)
    softmax = None if req.layers is None else [v for v in req.layers if v not in implicit or v in (req.mixers or ())]
    layers = layer_indices(softmax, facts)
    heads = indices(req.heads, facts.n_head, "heads", "heads per layer")
    focus = None
    focus_fields: frozenset[str] = frozenset()
    focus_region = None
    if req.focus is not None:
        check_head(req.focus.layer, req.focus.head, ("body", "focus"), facts)
        focus = (req.focus.layer, req.focus.head)
        focus_fields = frozenset(req.focus.include)
        focus_region = _region(req.focus.region, n_tokens, n_keys)
    include = set(req.include)
    implicit_heads = sum(facts.layers[i].get("mixer_heads") or facts.layers[i]["heads"] for i in implicit)
    _check_cells(svc, req, include, len(layers) * len(heads) + implicit_heads, n_tokens, n_keys)
    return CapturePlan(
        layers=layers,
        heads=heads,
        fields=frozenset(include - {"stats"}),
        stats="stats" in include,
        stats_unscaled=req.stats_unscaled,
        thumbnail=req.thumbnail,
        focus=focus,
        focus_fields=focus_fields,
        focus_thumbnail=req.focus.thumbnail if req.focus is not None else None,
        focus_region=focus_region,
        fuse=svc.fuse,
        implicit=implicit,
    )


def _implicit_layers(req: AttentionRequest, facts) -> tuple[int, ...]:
    """The value-linear layers ``req.layers`` names (never by default: the page asks for them by number);
    each is sent as its ``pattern``, M, or its signed ``thumbnail``, so ``include`` must hold pattern or
    ``thumbnail`` be set."""
    named = {v for v in req.layers or () if 0 <= v < facts.n_layer and facts.layers[v].get("implicit")}
    for v in req.mixers or ():
        if not (0 <= v < facts.n_layer and (facts.layers[v].get("implicit") or facts.layers[v].get("mixer"))):
            mixers = [i for i, about in enumerate(facts.layers) if about.get("implicit") or about.get("mixer")]
            raise ApiError(
                422, f"layer {v} has no value-linear mixer (this model's: {mixers})", loc=("body", "mixers"),
                type_="no_mixer",
            )
        named.add(v)
    named = tuple(sorted(named))
    if named and "pattern" not in req.include and not req.thumbnail:
        raise ApiError(
            422,
            f"layers {list(named)} are value-linear mixers, sent as their matrices M: include needs pattern "
            "(or ask thumbnail)",
            loc=("body", "include"),
            type_="implicit_needs_pattern",
        )
    return named


def _check_cells(svc: Service, req: AttentionRequest, include: set[str], n_heads: int, T: int, S: int) -> None:
    """Whole T×S matrices grow with T·S: an answer holding more than the server's
    ``max_matrix_cells`` of them is refused before any computing, naming what to ask instead."""
    limit = svc.max_matrix_cells
    matrices = set(MATRIX_FIELDS)
    if svc.loaded.facts.softcap is None:  # attn_scores_uncapped comes only from layers with a softcap
        matrices.discard("attn_scores_uncapped")
    if not svc.loaded.facts.score_parts:  # the parts of q·kᵀ (MLA's, DeBERTa's) come only from such layers
        matrices -= set(SCORE_PARTS)
    # a differential layer sends pattern_parts, two matrices, with pattern or when asked
    parts = 2 if svc.loaded.facts.differential else 0

    def count(names: set[str]) -> int:
        return len(names & matrices) + (parts if names & {"pattern", "pattern_parts"} else 0)

    grid = n_heads * count(include) * T * S
    focus = 0
    if req.focus is not None and req.focus.thumbnail is None and req.focus.region is None:
        focus = count(set(req.focus.include)) * T * S
    if grid + focus <= limit:
        return
    if grid > limit:
        loc, what = ("body", "include"), f"include asks for {grid:,} cells of whole matrices"
        instead = (
            "ask for fewer layers or heads, or a thumbnail of each head (thumbnail)"
            " with the matrices of one head (focus)"
        )
    else:
        loc, what = ("body", "focus"), f"focus asks for {focus:,} cells of whole matrices"
        instead = "ask for focus.thumbnail (max-pooled) or focus.region (the exact cells of one block)"
    raise ApiError(
        422,
        f"{what} ({T} tokens: {T * S:,} cells per matrix); the limit is {limit:,} per answer: {instead}",
        loc=loc,
        type_="answer_too_large",
        ctx={"limit": limit, "count": grid + focus},
    )


def _region(region: list[int] | None, T: int, S: int) -> tuple[int, int, int, int] | None:
    """``focus.region`` checked against the text: rows among its T queries and columns among its S keys, at most
    REGION_MAX each."""
    if region is None:
        return None
    q0, q1, k0, k1 = region
    if not (q0 < q1 <= T and k0 < k1 <= S):
        tokens = f"the text is {T} tokens" if S == T else f"{T} queries over {S} keys"
        msg = f"focus.region is {region}; it needs q0 < q1 <= {T} and k0 < k1 <= {S} ({tokens})"
        type_, limit = "region_out_of_range", T
    elif q1 - q0 > REGION_MAX or k1 - k0 > REGION_MAX:
        msg = f"focus.region is {q1 - q0}×{k1 - k0} cells; at most {REGION_MAX}×{REGION_MAX}"
        type_, limit = "region_too_large", REGION_MAX
    else:
        return (q0, q1, k0, k1)
    raise ApiError(422, msg, loc=("body", "focus", "region"), type_=type_, ctx={"limit": limit, "value": region})
