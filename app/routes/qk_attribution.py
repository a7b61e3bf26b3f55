"""``POST /api/qk-attribution``: why a head attends here, its raw score as query × key terms."""

from fastapi import APIRouter

from ..compute.causal import qk_attribution
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.qk_attribution import QKAttributionRequest, QKAttributionResponse
from ..schemas.subject import with_text_limit


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(QKAttributionRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)

    @router.post("/api/qk-attribution", response_model=QKAttributionResponse, responses=ERRORS_POST)
    async def qk_attribution_route(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """One head's raw score for one query and key, split into query-side × key-side terms (the
        embeddings, every earlier head and MLP, the biases; norm scales frozen): `sum(matrix) = score`."""
        return RawJSONResponse(await state.run(qk_attribution.qk_attribution_json, svc, body, prompt))

    return router
