"""``POST /api/attention``: what each requested layer and head computed for a text.

The answer is computed and encoded in a worker thread (:func:`attnscope.app.compute.attention.attention_json`:
selection, forward pass, encoding); it carries ``timing_ms`` as its last field and the same
timings in a ``Server-Timing`` header.
"""

from fastapi import APIRouter

from ..compute import attention as compute
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..responses import RawJSONResponse
from ..schemas.attention import AttentionRequest, AttentionResponse
from ..schemas.subject import with_text_limit


def server_timing(timings: dict[str, float]) -> dict[str, str]:
    """The timings in ms as ``Server-Timing`` and ``X-Timing-Ms`` headers."""
    return {
        "Server-Timing": ", ".join(f"{name};dur={value:.2f}" for name, value in timings.items()),
        "X-Timing-Ms": f"{timings['total']:.2f}",
    }


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(AttentionRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest)

    @router.post("/api/attention", response_model=AttentionResponse, responses=ERRORS_POST)
    async def attention(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        svc: ServiceDep,
        state: StateDep,
    ) -> RawJSONResponse:
        """Run the text through the model and return what each requested layer and head computed.

        `include`, `layers` and `heads` select what is computed and sent: the all-heads
        grid wants `["pattern", "stats"]`, a single-head view every field for one head.
        """
        content, timings = await state.run(compute.attention_json, svc, body, prompt)
        return RawJSONResponse(content, headers=server_timing(timings))

    return router
