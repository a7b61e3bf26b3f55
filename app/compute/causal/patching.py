"""``POST /api/patching``: the share of the logit difference each head or residual piece restores."""

from __future__ import annotations

from ....model.causal.lens import Unsupported
from ....model.causal.patching import PatchingError, patching
from ...errors import ApiError
from ...responses import dumps
from ...schemas.patching import PatchingRequest
from ...service import Service
from ...subject import Prompt, first_mask, prompt_of, subject_of
from ..checks import check_token_id, position_of
from ..rounding import round_sig
from . import elapsed_ms, not_exact


def patching_json(
    svc: Service, req: PatchingRequest, clean: Prompt, corrupt: Prompt, started: float | None = None
) -> bytes:
    """The POST /api/patching answer: the share of the logit difference each head or residual piece restores."""
    t0 = clean.started if started is None else started
    facts = svc.loaded.facts
    pair = facts.architecture == "encoder-decoder"
    if pair:  # the corrupt subject is a source alone: both are read with the clean run's target
        clean, corrupt = _sources(svc, req, clean, corrupt)
    else:
        _same_count(req, len(clean.ids), len(corrupt.ids), "")
    n = len(clean.ids)
    # the default: the last position, on an encoder the first mask token (its guess there), as the other routes
    position = position_of(req.position if req.position is not None else first_mask(svc, clean.ids), n)
    check_token_id(req.token_id, "token_id", facts)
    check_token_id(req.foil_id, "foil_id", facts)
    try:
        got = patching(corrupt.backend, clean.ids, corrupt.ids, position, req.token_id, req.foil_id, req.what,
                       clean_backend=clean.backend)
    except Unsupported as e:
        raise not_exact(e, "what") from None
    except PatchingError as e:
        raise ApiError(422, str(e), loc=("body", e.field), type_="value_error") from None
    restored = round_sig(got.restored.numpy()).tolist()
    rows = facts.by_number(restored) if req.what == "heads" else restored
    if pair:  # the stack's own layers and heads (the residual: the decoder's blocks)
        stack = next(s for s in facts.stacks if s["name"] == (clean.stack if req.what == "heads" else "decoder"))
        rows = [row[: stack["n_head"]] if req.what == "heads" else row for row in rows[: stack["n_layer"]]]
    body = {
        "tokens": clean.tokens,
        "corrupt_tokens": corrupt.tokens,
        **({"spans": clean.spans, "corrupt_spans": corrupt.spans} if clean.spans else {}),
        **corrupt.adds,
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
        req.what: rows,
        "timing_ms": elapsed_ms(t0),
    }
    return dumps(body)


def _same_count(req: PatchingRequest, clean: int, corrupt: int, why: str) -> None:
    """A 422 naming the corrupt text's field unless it has as many tokens as the clean one."""
    if clean == corrupt:
        return
    raise ApiError(
        422,
        f"corrupt is {corrupt} tokens and clean {clean}: patching needs as many tokens in both{why}",
        loc=("body", "corrupt" if req.corrupt_messages is None else "corrupt_messages"),
        type_="token_count_mismatch",
        ctx={"clean": clean, "corrupt": corrupt},
    )


def corrupt_subject(svc: Service, req: PatchingRequest) -> Prompt:
    """The corrupt run's subject, resolved by the route's dependency: on an encoder-decoder its source alone (read
    with the clean run's target in :func:`_sources`), else as the clean one is."""
    if svc.loaded.facts.architecture != "encoder-decoder":
        return subject_of(svc, req, text="corrupt", messages="corrupt_messages")
    return prompt_of(svc, req.corrupt, req.corrupt_messages, req.add_generation_prompt,
                     names=("corrupt", "corrupt_messages"))


def _sources(svc: Service, req: PatchingRequest, clean: Prompt, source: Prompt) -> tuple[Prompt, Prompt]:
    """An encoder-decoder's clean and corrupt runs: the two texts are sources read with one target (the
    request's, or the one the model writes from the clean source); both prompts' ids are the target's. Patching
    the encoder's heads writes each clean head's output at every source position: the sources need as many
    tokens there; the decoder's heads, its cross heads and its residual stream sit at target positions."""
    if clean.stack == "encoder":
        _same_count(req, len(clean.adds["source_ids"]), len(source.ids), " (the sources, on the encoder stack)")
    got = clean.adds
    target, tokens, offsets = got["target_ids"], got["target_tokens"], [[0, 0]] * len(got["target_ids"])
    backend = svc.loaded.backend
    adds = {
        "source_tokens": got["source_tokens"],
        "corrupt_source_tokens": source.tokens,
        "target": got["target"],
        "target_generated": got["target_generated"],
    }
    bound = [backend.with_target(ids, target, clean.stack) for ids in (got["source_ids"], source.ids)]
    keep = {"stack": clean.stack, "opts": clean.opts, "started": clean.started}
    clean_run = Prompt(target, tokens, offsets, bound[0], {}, **keep)
    return clean_run, Prompt(target, tokens, offsets, bound[1], adds, **keep)
