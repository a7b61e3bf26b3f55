"""``POST /api/knockout``: see :func:`attnscope.app.compute.causal.knockout.knockout_json`."""

from fastapi import APIRouter

from ..compute.causal import knockout as compute
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.knockout import KnockoutRequest, KnockoutResponse
from ..schemas.subject import with_text_limit


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(KnockoutRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)

    @router.post("/api/knockout", response_model=KnockoutResponse, responses=ERRORS_POST)
    async def knockout(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """Chosen edges (query, key) of a layer set to -inf before the softmax, each row renormalising:
        the predictions after, and log p(token_id) at position before and after."""
        return RawJSONResponse(await state.run(compute.knockout_json, svc, body, prompt))

    return router
