"""``POST /api/head-effects``: what switching off each head alone does to one prediction."""

from fastapi import APIRouter

from ..compute import effects
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.effects import HeadEffectsRequest, HeadEffectsResponse
from ..schemas.subject import with_text_limit


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(HeadEffectsRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)

    @router.post("/api/head-effects", response_model=HeadEffectsResponse, responses=ERRORS_POST)
    async def head_effects(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """For one position and one target token, the change in log-probability when each head
        alone is switched off (`delta[layer][head]`), all heads in batched forward passes."""
        return RawJSONResponse(await state.run(effects.head_effects_json, svc, body, prompt))

    return router
