"""``POST /api/lens``: see :func:`attnscope.app.compute.causal.lens.lens_json`."""

import time

from fastapi import APIRouter

from ..compute.causal import lens as compute
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute
from ..responses import RawJSONResponse
from ..schemas.subject import with_text_limit
from ..schemas.lens import LensRequest, LensResponse


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(LensRequest, max_text_chars)

    @router.post("/api/lens", response_model=LensResponse, responses=ERRORS_POST)
    async def lens(
        body: LimitedRequest,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """The logit lens: the final norm and unembedding applied to the residual stream after the
        embeddings and after each block, the top tokens per position."""
        started = time.perf_counter()
        return RawJSONResponse(await state.run(compute.lens_json, svc, body, started))

    return router
