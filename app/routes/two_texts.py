"""The two-texts view's route, URL ``POST /api/compare-texts``: one head on two texts, their patterns and
their difference (:mod:`attnscope.app.compute.two_texts`)."""


from fastapi import APIRouter

from ..compute import two_texts
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.subject import with_text_limit
from ..schemas.two_texts import TwoTextsRequest, TwoTextsResponse


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(TwoTextsRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)
    SubjectBDep = subject_dep(LimitedRequest, "text_b", None)  # the second text: no messages of its own

    @router.post("/api/compare-texts", response_model=TwoTextsResponse, responses=ERRORS_POST)
    async def two_texts_route(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        prompt_b: SubjectBDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """The same head on `text` and `text_b`: both patterns and, for texts of as many tokens, their
        difference cell by cell (`text_b` − `text`)."""
        return RawJSONResponse(await state.run(two_texts.two_texts_json, svc, body, prompt, prompt_b))

    return router
