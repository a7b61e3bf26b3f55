"""``GET /api/model`` (the loaded model's description) and ``GET /api/heads`` (role scores per
head): both computed once, at startup (:func:`attnscope.app.service.build_service`)."""

from __future__ import annotations

from fastapi import APIRouter

from ..deps import ERRORS_GET, ServiceDep, StrictJSONRoute
from ..responses import RawJSONResponse
from ..schemas.model import HeadsResponse, ModelInfo

router = APIRouter(route_class=StrictJSONRoute, tags=["model"])


@router.get("/api/model", response_model=ModelInfo, responses=ERRORS_GET)
async def get_model(svc: ServiceDep) -> RawJSONResponse:
    """The loaded model: architecture, device, parameter count, checkpoint, training metrics."""
    return RawJSONResponse(svc.info_json)


@router.get("/api/heads", response_model=HeadsResponse, responses=ERRORS_GET)
async def heads(svc: ServiceDep) -> RawJSONResponse:
    """Role scores per head (previous-token, first-token, induction, self), computed at startup."""
    return RawJSONResponse(svc.heads_json)
