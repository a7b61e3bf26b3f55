"""``POST /api/head-effects``: what switching off each head alone does to one prediction."""

import time

from fastapi import APIRouter

from ..compute import effects
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute
from ..responses import RawJSONResponse
from ..schemas.subject import with_text_limit
from ..schemas.effects import HeadEffectsRequest, HeadEffectsResponse


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(HeadEffectsRequest, max_text_chars)

    @router.post("/api/head-effects", response_model=HeadEffectsResponse, responses=ERRORS_POST)
    async def head_effects(
        body: LimitedRequest,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """For one position and one target token, the change in log-probability when each head
        alone is switched off (`delta[layer][head]`), all heads in batched forward passes."""
        started = time.perf_counter()
        return RawJSONResponse(await state.run(effects.head_effects_json, svc, body, started))

    return router
