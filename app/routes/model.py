"""``GET /api/model`` (the loaded model's description) and ``GET /api/heads`` (role scores per
head): both computed once per model (:func:`attnscope.app.service.build_service`); ``GET
/api/models``: the models on this machine that could be served (the Hub cache, Ollama, LM Studio);
``POST /api/model``: serve another of them (:mod:`attnscope.app.compute.switch`)."""

from __future__ import annotations

from fastapi import APIRouter

from ..compute.models import machine_models, roots, shown
from ..compute.switch import check_memory, find_local, free_bytes, keep_serving, start_switch
from ..deps import ERRORS_GET, ServiceDep, StateDep, StrictJSONRoute
from ..responses import RawJSONResponse
from ..schemas.model import HeadsResponse, ModelInfo, ModelsResponse, SwitchRequest, SwitchStatus


def make_router(max_text_chars: int) -> APIRouter:
    """The routes of this resource (every route module is built alike: ``max_text_chars`` is the
    server's text limit, which the request models of routes that take a text hold)."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])

    @router.get("/api/model", response_model=ModelInfo, responses=ERRORS_GET)
    async def get_model(svc: ServiceDep) -> RawJSONResponse:
        """The loaded model: architecture, device, parameter count, checkpoint, training metrics."""
        return RawJSONResponse(svc.info_json)

    @router.get("/api/heads", response_model=HeadsResponse, responses=ERRORS_GET)
    async def heads(svc: ServiceDep) -> RawJSONResponse:
        """Role scores per head (previous-token, first-token, induction, self), computed at startup."""
        return RawJSONResponse(svc.heads_json)

    @router.get("/api/models", response_model=ModelsResponse, responses=ERRORS_GET)
    def models(state: StateDep) -> dict:
        """The models on this machine, as ``attnscope models`` lists them (the Hugging Face cache's causal
        LMs, the GGUF files of Ollama and LM Studio; read from disk, no network) and the folders and
        .gguf files of ``--models-dir``, the one the server started with first; which one is served, and
        a switch in progress (``POST /api/model``). Paths are relative to where each was found."""
        serving = state.service.info["name"] if state.service is not None else None
        places = roots(state.settings.models_dir)
        models = [shown(m, places, serving) for m in machine_models(state)]
        return {"models": models, "serving": serving, "switch": state.switch}

    @router.post(
        "/api/model",
        status_code=202,
        response_model=SwitchStatus,
        response_model_exclude_unset=True,  # `cancelled` goes with serving only
        responses={
            **ERRORS_GET,
            409: {"description": "another model is loading (or its cancelled load is finishing)"},
            422: {"description": "name is not a model on this machine (GET /api/models)"},
            507: {"description": "the model does not fit in memory beside the current one"},
        },
    )
    def switch_model(body: SwitchRequest, state: StateDep, svc: ServiceDep) -> dict:
        """Serve another model of ``GET /api/models``: checked (on this machine, fits in memory beside the
        current one, which keeps answering), then loaded in the background; 202 at once. ``GET
        /api/models`` says when it is served (``serving``) or why it failed (``switch``). Naming the
        served model cancels a switch in progress (``cancelled`` names it): that model is never served."""
        from ..lifespan import load_service

        entry = find_local(body.name, machine_models(state))
        served = keep_serving(state, entry["name"])  # the served model: a switch pending is cancelled
        if served is not None:
            return served
        settings = state.settings
        check_memory(entry, settings.dtype, *free_bytes(settings))
        # the lens fits the model the server started with: kept when switching back to it, else dropped
        started = state.started_with is not None and entry["path"] == state.started_with["path"]
        update = {"checkpoint": entry["path"], "model": None, "jlens": settings.jlens if started else None}
        start_switch(state, entry, lambda path: load_service(settings.model_copy(update=update)))
        return {"name": entry["name"], "status": "loading"}

    return router
