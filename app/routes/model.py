"""``GET /api/model`` (the loaded model's description) and ``GET /api/heads`` (role scores per
head): both computed once, at startup (:func:`attnscope.app.service.build_service`); ``GET
/api/models``: the models on this machine that could be served (the Hub cache, Ollama, LM Studio)."""

from __future__ import annotations

from fastapi import APIRouter

from ..compute.models import local_models
from ..deps import ERRORS_GET, ServiceDep, StrictJSONRoute
from ..responses import RawJSONResponse
from ..schemas.model import HeadsResponse, ModelInfo, ModelsResponse

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
def models() -> dict:
    """The models on this machine, as ``attnscope models`` lists them: the Hugging Face cache's causal
    LMs and the GGUF files of Ollama and LM Studio (read from disk, no network)."""
    return {"models": local_models()}
