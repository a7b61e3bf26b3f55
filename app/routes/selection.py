"""The Lines view's selected tokens, URL ``POST /api/selection``: several tokens' attention in one head,
summed or averaged (:mod:`attnscope.app.compute.selection`)."""

from fastapi import APIRouter

from ..compute import selection
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.selection import SelectionRequest, SelectionResponse
from ..schemas.subject import with_text_limit


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(SelectionRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)

    @router.post("/api/selection", response_model=SelectionResponse, responses=ERRORS_POST)
    async def selection_route(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """Several query tokens' rows (where they look) and several key tokens' columns (who looks
        at them) of one head's pattern, summed or averaged."""
        return RawJSONResponse(await state.run(selection.selection_json, svc, body, prompt))

    return router
