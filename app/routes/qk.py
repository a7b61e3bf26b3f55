"""The q · k view's route, URL ``POST /api/neuron``: one query and one key of one head, element by element
(BertViz's neuron view; :mod:`attnscope.app.compute.qk`)."""

from fastapi import APIRouter

from ..compute import qk
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.qk import QkRequest, QkResponse
from ..schemas.subject import with_text_limit


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(QkRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)

    @router.post("/api/neuron", response_model=QkResponse, responses=ERRORS_POST)
    async def qk_route(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """For one head, one query and one key: q, k and q ⊙ k element by element (their sum is the
        raw score), the score softmax saw and the weight."""
        return RawJSONResponse(await state.run(qk.qk_json, svc, body, prompt))

    return router
