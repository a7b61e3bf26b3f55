"""Routes of the ablation what-ifs: ``POST /api/head-effects`` and ``POST /api/generate``.

``/api/generate`` streams ``application/x-ndjson``: a line per new token as it is produced.
The stream holds one of the server's concurrency slots for its whole life (as a long
``/api/attention`` does), computes each token in a worker thread, and stops at the next token
once the client has gone. It is sent uncompressed (``Content-Encoding: identity``): gzip would
hold small lines back until it had a block's worth.
"""

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request
from starlette.responses import StreamingResponse

from . import service, service_ablation
from .responses import RawJSONResponse
from .schemas_ablation import (
    GenerateRequest,
    HeadEffectsRequest,
    HeadEffectsResponse,
    ndjson_responses,
    with_text_limit,
)


def install(
    router: APIRouter,
    state: Any,
    get_service: Callable[[], service.Service],
    run_limited: Callable,
    errors: dict,
    max_text_chars: int,
) -> None:
    """Add the two routes to ``router``; ``state.semaphore`` bounds the work running at once."""
    EffectsRequest = with_text_limit(HeadEffectsRequest, max_text_chars)
    GenRequest = with_text_limit(GenerateRequest, max_text_chars)

    @router.post("/api/head-effects", response_model=HeadEffectsResponse, responses=errors, tags=["model"])
    async def head_effects(body: EffectsRequest, svc: service.Service = Depends(get_service)) -> RawJSONResponse:  # type: ignore[valid-type]
        """For one position and one target token, the change in log-probability when each head
        alone is switched off (`delta[layer][head]`), all heads in batched forward passes."""
        started = time.perf_counter()
        return RawJSONResponse(await run_limited(service_ablation.head_effects_json, svc, body, started))

    @router.post("/api/generate", responses={**errors, **ndjson_responses()}, tags=["model"])
    async def generate(
        body: GenRequest,  # type: ignore[valid-type]
        request: Request,
        svc: service.Service = Depends(get_service),
    ) -> StreamingResponse:
        """Continue the text token by token: an NDJSON line per new token (the token, its
        probability, the top guesses, where it looked in every head), then `{"done": true}`.
        Greedy unless `do_sample`; stops at `max_new_tokens`, the model's end token or a full context."""
        lines = service_ablation.start_generation(svc, body)  # a 422 here, before any line
        return StreamingResponse(
            _stream(lines, request, state),
            media_type="application/x-ndjson",
            headers={"Content-Encoding": "identity", "Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )


async def _stream(lines, request: Request, state: Any) -> AsyncIterator[bytes]:
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
