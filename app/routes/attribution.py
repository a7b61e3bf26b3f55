"""``POST /api/attribution``: each component's direct contribution to one token's logit."""

from fastapi import APIRouter

from ..compute.causal import attribution
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.attribution import AttributionRequest, AttributionResponse
from ..schemas.subject import with_text_limit


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(AttributionRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)

    @router.post("/api/attribution", response_model=AttributionResponse, responses=ERRORS_POST)
    async def attribution_route(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """Direct logit attribution: what each head, each MLP and the embeddings write into the
        residual stream, through the final norm (its scale frozen at its value on this text) and the
        token's unembedding row. `sum(heads) + sum(mlps) + embed + rest = logit`."""
        return RawJSONResponse(await state.run(attribution.attribution_json, svc, body, prompt))

    return router
