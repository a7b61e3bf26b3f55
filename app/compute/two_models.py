"""The two-models view, ``POST /api/compare-models``: a second model of ``GET /api/models`` beside the served one, and
both compared head by head on one text (:mod:`attnscope.model.compare`).

The second model loads as a model switch does (:mod:`.switch`): checked to be on this machine
and to fit in memory beside the served model (507 naming both sizes), then loaded in a thread
while the request answers 202; asked for again, it answers. It stays loaded for later requests
until another second model is asked for (which replaces it). Naming the served model compares
it with itself, nothing loaded.
"""

from __future__ import annotations

import time

import numpy as np

from ...model.compare import compare
from ..errors import ApiError
from ..responses import dumps
from ..schemas.two_models import TwoModelsRequest
from ..service import Service
from ..subject import Prompt, single_stack, subject_of
from .checks import check_attention_layer, check_index
from .switch import check_memory, find_local, free_bytes, start_switch


def second_service(state, models: list[dict], name: str, load) -> Service | None:
    """The second model named ``name``, loaded; None while it loads (started here if need be, after
    the memory check). A load that failed is said once as a 422 naming ``model_b``; asked for
    again, it is tried again. ``load(path)`` -> Service."""
    served = state.service
    if served is not None and served.info["name"] == name:
        return served
    entry = find_local(name, models, field="model_b")
    with state.switch_lock:
        held = state.second_service
        if held is not None and held.extra.get("listed_as") == name:
            return held
        job = state.switch_job
        if job is not None and job["kind"] == "second" and job["name"] == name:
            return None
        failed = state.second
        if failed is not None and failed["name"] == name and failed["status"] == "failed":
            state.second = None
            raise ApiError(
                422, f"model_b is {name!r}: it could not be loaded: {failed['error']}", loc=("body", "model_b")
            )
        state.second_service = None  # another second model: the one held goes
    settings = state.settings
    check_memory(entry, settings.dtype, *free_bytes(settings), field="model_b")

    def loaded(path):
        svc = load(path)
        svc.extra["listed_as"] = name
        return svc

    start_switch(state, entry, loaded, kind="second", field="model_b")
    return None


def same_shape(a: Service, b: Service) -> None:
    """The two models have the same attention layers and heads per layer; else a 422 naming ``model_b``."""
    fa, fb = a.loaded.facts, b.loaded.facts
    for what, x, y in (
        ("layers", fa.n_layer, fb.n_layer),
        ("attention layers", fa.attention_layers, fb.attention_layers),
        ("heads per layer", fa.n_head, fb.n_head),
    ):
        if x != y:
            raise ApiError(
                422,
                f"model_b is {b.extra.get('listed_as', fb.name)!r}: it has {y} {what} and the served model {x}; "
                "heads are compared one to one, so the shapes must match",
                loc=("body", "model_b"),
                type_="model_shape_differs",
                ctx={"what": what, "model_a": x, "model_b": y},
            )


SEQ2SEQ_WHY = (
    ": it runs both models over one sequence of tokens and holds their heads one to one, while an "
    "encoder-decoder's heads lie in three stacks over a source and a target, which both models would have to read "
    "with one target (the request's or the served model's written one) and compare stack by stack"
)


def one_sequence(a: Service) -> None:
    """A 422 naming ``stack`` on an encoder-decoder, before model_b is looked for (nothing loaded for it)."""
    single_stack(a, "comparing two models", SEQ2SEQ_WHY)


def same_ids(a: Service, b: Service, req: TwoModelsRequest, prompt: Prompt) -> None:
    """The subject's ``prompt`` in the served model has the same ids in model_b (its own prompt, laid out
    here: model_b is known once loaded); else a 422 naming ``model_b`` and the first difference."""
    ids = prompt.ids
    try:
        ids_b = subject_of(b, req).ids
    except ApiError as e:
        item = e.detail[0]
        name = b.extra.get("listed_as", b.loaded.facts.name)
        msg = f"model_b is {name!r}: {item['msg']}"
        raise ApiError(422, msg, loc=("body", "model_b"), type_=item["type"]) from None
    if ids_b != ids:
        at = next((i for i, (x, y) in enumerate(zip(ids, ids_b)) if x != y), min(len(ids), len(ids_b)))
        why = (
            f"token {at} is id {ids[at]} ({a.displays[ids[at]]!r}) in the served model and id {ids_b[at]} in model_b"
            if at < min(len(ids), len(ids_b))
            else f"the served model gives {len(ids)} tokens and model_b {len(ids_b)}"
        )
        raise ApiError(
            422,
            f"model_b is {b.extra.get('listed_as', b.loaded.facts.name)!r}: its tokenizer gives other token ids "
            f"for this text ({why}); the two patterns would be over different tokens",
            loc=("body", "model_b"),
            type_="token_ids_differ",
            ctx={"position": at},
        )


def check_head(a: Service, req: TwoModelsRequest) -> None:
    """The chosen layer and head are the served model's: checked before model_b is looked for, so a
    request wrong in both is told about its own numbers first."""
    facts = a.loaded.facts
    check_attention_layer(req.layer, ("body", "layer"), "layer", facts)
    check_index(req.head, facts.n_head, ("body", "head"), "head", f"the model has {facts.n_head} heads per layer")


def two_models_json(
    a: Service, b: Service, req: TwoModelsRequest, prompt: Prompt, started: float | None = None
) -> bytes:
    """The answer of ``POST /api/compare-models``, as JSON bytes; ``prompt``: the subject in the served model."""
    started = prompt.started if started is None else started
    one_sequence(a)
    same_shape(a, b)
    check_head(a, req)
    facts = a.loaded.facts
    same_ids(a, b, req, prompt)
    ids = prompt.ids
    T = len(ids)
    if 4 * T * T > a.max_matrix_cells:
        raise ApiError(
            422,
            f"text is {T} tokens: the answer's four T×T matrices (the two patterns, their difference and the "
            f"mask) hold {4 * T * T} cells, over max_matrix_cells "
            f"{a.max_matrix_cells}",
            loc=("body", "text"),
            type_="too_many_cells",
            ctx={"limit": a.max_matrix_cells, "count": 4 * T * T},
        )
    result = compare(a.loaded.backend, b.loaded.backend, ids, (req.layer, req.head))

    def per_layer(values: dict) -> list:
        return facts.by_number([values[n].tolist() for n in facts.attention_layers])

    return dumps(
        {
            "model_a": a.info["name"],
            "model_b": b.extra.get("listed_as", b.info["name"]),
            "tokens": [a.displays[i] for i in ids],
            **({"spans": prompt.spans} if prompt.spans else {}),
            "divergence": per_layer(result.divergence),
            "max_abs": per_layer(result.max_abs),
            "argmax_agreement": per_layer(result.argmax_agreement),
            "a": result.a,
            "b": result.b,
            "difference": result.b - result.a,
            "mask": result.mask.astype(np.uint8),
            "timing_ms": round((time.perf_counter() - started) * 1000, 3),
        }
    )
