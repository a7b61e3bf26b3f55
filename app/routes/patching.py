"""``POST /api/patching``: see :func:`attnscope.app.compute.causal.patching.patching_json`."""


from fastapi import APIRouter

from ..compute.causal import patching as compute
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.patching import PatchingResponse, with_pair_limit


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_pair_limit(max_text_chars)
    CleanDep = subject_dep(LimitedRequest, "clean", "clean_messages")
    CorruptDep = subject_dep(LimitedRequest, "corrupt", "corrupt_messages", resolve=compute.corrupt_subject)

    @router.post("/api/patching", response_model=PatchingResponse, responses=ERRORS_POST)
    async def patching(
        body: LimitedRequest,  # type: ignore[valid-type]
        clean: CleanDep,  # type: ignore[valid-type]
        corrupt: CorruptDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """Each head's output, or the residual stream after each block at each position, taken from
        the clean run into the corrupt run: the share of the logit difference (token vs foil) restored."""
        return RawJSONResponse(await state.run(compute.patching_json, svc, body, clean, corrupt))

    return router
