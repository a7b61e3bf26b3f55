"""``POST /api/knockout``: see :func:`attnscope.app.compute.causal.knockout.knockout_json`."""

import time

from fastapi import APIRouter

from ..compute.causal import knockout as compute
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute
from ..responses import RawJSONResponse
from ..schemas.subject import with_text_limit
from ..schemas.knockout import KnockoutRequest, KnockoutResponse


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(KnockoutRequest, max_text_chars)

    @router.post("/api/knockout", response_model=KnockoutResponse, responses=ERRORS_POST)
    async def knockout(
        body: LimitedRequest,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """Chosen edges (query, key) of a layer set to -inf before the softmax, each row renormalising:
        the predictions after, and log p(token_id) at position before and after."""
        started = time.perf_counter()
        return RawJSONResponse(await state.run(compute.knockout_json, svc, body, started))

    return router
