"""``POST /api/rollout``: attention rollout (Abnar & Zuidema) for one token, across the layers."""

from fastapi import APIRouter

from ..compute import rollout
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.rollout import RolloutRequest, RolloutResponse
from ..schemas.subject import with_text_limit


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(RolloutRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)

    @router.post("/api/rollout", response_model=RolloutResponse, responses=ERRORS_POST)
    async def rollout_route(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """How much the chosen token's representation after each layer draws on each input token:
        the layers' head-averaged attention multiplied through, with or without the residual."""
        return RawJSONResponse(await state.run(rollout.rollout_json, svc, body, prompt))

    return router
