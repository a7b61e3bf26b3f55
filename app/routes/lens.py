"""``POST /api/lens``: see :func:`attnscope.app.compute.causal.lens.lens_json`."""

from fastapi import APIRouter

from ..compute.causal import lens as compute
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.lens import LensRequest, LensResponse
from ..schemas.subject import with_text_limit


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(LensRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)

    @router.post("/api/lens", response_model=LensResponse, responses=ERRORS_POST)
    async def lens(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """The logit lens: the final norm and unembedding applied to the residual stream after the
        embeddings and after each block, the top tokens per position."""
        return RawJSONResponse(await state.run(compute.lens_json, svc, body, prompt))

    return router
