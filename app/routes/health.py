"""``/healthz`` (the process is running) and ``/readyz`` (the model is loaded), for probes."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel
from starlette.responses import Response

from ..deps import ERRORS_GET, StateDep, StrictJSONRoute
from ..responses import ORJSONResponse


class Health(BaseModel):
    status: str


def make_router(max_text_chars: int) -> APIRouter:
    """The routes of this resource (every route module is built alike: ``max_text_chars`` is the
    server's text limit, which the request models of routes that take a text hold)."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["health"])

    @router.get("/healthz", response_model=Health, summary="The process is running")
    async def healthz() -> ORJSONResponse:
        return ORJSONResponse({"status": "ok"})

    @router.get("/readyz", response_model=Health, responses=ERRORS_GET, summary="The model is loaded (503 before)")
    async def readyz(state: StateDep) -> ORJSONResponse:
        if not state.ready:
            return ORJSONResponse({"detail": "the model is not loaded yet"}, status_code=503)
        return ORJSONResponse({"status": "ready"})

    # HEAD for probes and load balancers that send it: the status of GET, no body, not in the schema
    @router.head("/healthz", include_in_schema=False)
    async def healthz_head() -> Response:
        return Response(status_code=200)

    @router.head("/readyz", include_in_schema=False)
    async def readyz_head(state: StateDep) -> Response:
        return Response(status_code=200 if state.ready else 503)

    return router
