"""``POST /api/generate``: the text continued token by token, streamed as ``application/x-ndjson``.

A line per new token as it is produced. The stream holds one of the server's concurrency slots
for its whole life (as a long ``/api/attention`` does), computes each token in a worker thread,
and stops at the next token once the client has gone. It is sent uncompressed
(``Content-Encoding: identity``): gzip would hold small lines back until it had a block's worth.
"""

from collections.abc import AsyncIterator, Iterator

import anyio
from fastapi import APIRouter, Request
from starlette.responses import StreamingResponse

from ..compute import generation
from ..deps import ERRORS_POST, ServiceDep, StateDep, StrictJSONRoute, subject_dep
from ..lifespan import AppState
from ..schemas.generation import GenerateRequest, ndjson_responses
from ..schemas.subject import with_text_limit


def make_router(max_text_chars: int) -> APIRouter:
    """The route, its request model holding the server's text limit."""
    router = APIRouter(route_class=StrictJSONRoute, tags=["model"])
    LimitedRequest = with_text_limit(GenerateRequest, max_text_chars)
    SubjectDep = subject_dep(LimitedRequest, resolve=generation.generation_subject)

    @router.post("/api/generate", responses={**ERRORS_POST, **ndjson_responses()})
    async def generate(
        body: LimitedRequest,  # type: ignore[valid-type]
        prompt: SubjectDep,  # type: ignore[valid-type]
        request: Request,
        svc: ServiceDep,
        state: StateDep,
    ) -> StreamingResponse:
        """Continue the text token by token: an NDJSON line per new token (the token, its
        probability, the top guesses, where it looked in every head), then `{"done": true}`.
        Greedy unless `do_sample`; stops at `max_new_tokens`, the model's end token or a full context."""
        lines = generation.start_generation(svc, body, prompt)  # a 422 here, before any line
        return StreamingResponse(
            _stream(lines, request, state),
            media_type="application/x-ndjson",
            headers={"Content-Encoding": "identity", "Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return router


async def _stream(lines: Iterator[bytes], request: Request, state: AppState) -> AsyncIterator[bytes]:
    """The lines, each made in a worker thread, under one concurrency slot; stops when the client has gone."""
    done = object()
    assert state.semaphore is not None
    async with state.semaphore:
        try:
            while not await request.is_disconnected():
                line = await anyio.to_thread.run_sync(next, lines, done)
                if line is done:
                    break
                yield line
        finally:
            lines.close()
