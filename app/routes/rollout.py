"""``POST /api/rollout``: attention rollout (Abnar & Zuidema) for one token, across the layers."""

import time

from fastapi import APIRouter

from ..compute import rollout
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute
from ..responses import RawJSONResponse
from ..schemas.subject import with_text_limit
from ..schemas.rollout import RolloutRequest, RolloutResponse


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(RolloutRequest, max_text_chars)

    @router.post("/api/rollout", response_model=RolloutResponse, responses=ERRORS_POST)
    async def rollout_route(
        body: LimitedRequest,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """How much the chosen token's representation after each layer draws on each input token:
        the layers' head-averaged attention multiplied through, with or without the residual."""
        started = time.perf_counter()
        return RawJSONResponse(await state.run(rollout.rollout_json, svc, body, started))

    return router
