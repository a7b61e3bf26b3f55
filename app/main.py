"""The FastAPI application: ``create_app(settings)``.

* the checkpoint is loaded once, in ``lifespan`` (head role scores computed then too);
  ``/readyz`` says 503 until that is done, the model endpoints say 503 as well;
* routes are thin: validate (pydantic), then run a function of :mod:`app.service` in a
  worker thread, under a semaphore that bounds how many run at once, so the event loop
  (and ``/healthz``) stays responsive while long requests compute;
* the static browser app (``frontend/``) is mounted at ``/`` after the API routes, and
  ``/vendor/plotly.min.js`` is served from the installed ``plotly`` package;
* ``/docs`` loads Swagger UI from the installed ``fastapi-offline`` package, never from a CDN
  (ReDoc is left out: its bundle calls cdn.redoc.ly);
* middleware, outermost first: body size limit (413), CORS (only if origins are
  configured), gzip.

``POST /api/attention`` answers with ``timing_ms`` as its last field and the same timings
in a ``Server-Timing`` header; everything before ``timing_ms`` is byte-identical for
identical requests.
"""

import ctypes
import ctypes.util
import json
import logging
import os
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import torch
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import FileResponse, Response
from starlette.routing import Route
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

from .. import frontend
from ..model.checkpoint import CheckpointError
from ..model.registry import load_model
from . import routes_ablation, service
from .errors import install_error_handlers
from .middleware import BodySizeLimitMiddleware
from .responses import ORJSONResponse, RawJSONResponse
from .schemas import (
    AttentionResponse,
    BagOfWordsRequest,
    BagOfWordsResponse,
    ErrorResponse,
    HeadsResponse,
    Health,
    ModelInfo,
    SoftmaxScalingRequest,
    SoftmaxScalingResponse,
    VarianceRequest,
    VarianceResponse,
    attention_request_model,
)
from .settings import Settings

log = logging.getLogger("attnscope")

FRONTEND_DIR = Path(frontend.__file__).parent
PLOTLY_JS = Path(__import__("plotly").__file__).parent / "package_data" / "plotly.min.js"
LONG_CACHE = "public, max-age=31536000, immutable"
GZIP_LEVEL = 1  # numeric JSON: level 1 is ~5x smaller already, and several times faster than 6


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class AppState:
    """What the routes share: settings, the loaded service, the concurrency bound."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.service: service.Service | None = None
        self.semaphore: anyio.Semaphore | None = None
        self.startup_error: str | None = None

    @property
    def ready(self) -> bool:
        return self.service is not None


# ------------------------------------------------------------------ request parsing


class StrictJSONRequest(Request):
    """JSON bodies must be UTF-8 and standard JSON (no NaN/Infinity); otherwise a 422."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as e:
                raise json.JSONDecodeError(f"not UTF-8 (byte {e.start})", "", 0) from None

            def reject(name: str) -> Any:
                raise json.JSONDecodeError(f"{name} is not a JSON number", text, text.find(name))

            try:
                self._json = json.loads(text, parse_constant=reject)
            except RecursionError:
                raise json.JSONDecodeError("nested too deeply", text, 0) from None
        return self._json


class StrictJSONRoute(APIRoute):
    def get_route_handler(self):
        handler = super().get_route_handler()

        async def strict_handler(request: Request):
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler


# ------------------------------------------------------------------ static files


class FrontendFiles(StaticFiles):
    """``frontend/`` at ``/``. Only GET/HEAD of files inside it; Python files are not served.

    A path that belongs to an API route but came with the wrong method gets 405 with the
    route's ``Allow`` header (the mount would otherwise swallow it), and unknown ``/api/``
    paths a JSON 404.
    """

    HIDDEN_SUFFIXES = (".py", ".pyc")

    def __init__(self, *, api_routes, **kwargs) -> None:
        super().__init__(**kwargs)
        self.api_routes = api_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            allowed = set()
            for route in self.api_routes():
                if isinstance(route, Route) and route.path_regex.match(path):
                    allowed |= route.methods or set()
            if allowed:
                raise StarletteHTTPException(405, "Method Not Allowed", headers={"Allow": ", ".join(sorted(allowed))})
            if path == "/api" or path.startswith("/api/"):
                raise StarletteHTTPException(404, "Not Found")
        await super().__call__(scope, receive, send)

    async def get_response(self, path: str, scope: Scope):
        parts = Path(path).parts
        if path.endswith(self.HIDDEN_SUFFIXES) or "__pycache__" in parts:
            raise StarletteHTTPException(404, "Not Found")
        return await super().get_response(path, scope)


# ------------------------------------------------------------------ lifespan


class LifespanErrorMiddleware:
    """Turns a failed startup's traceback into the one line the lifespan recorded."""

    def __init__(self, app, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def send_one_line(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed" and self.state.startup_error:
                message = {**message, "message": self.state.startup_error}
            await send(message)

        await self.app(scope, receive, send_one_line)


def configure_torch(settings: Settings) -> None:
    torch.set_num_threads(settings.threads)


M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
HEAP_MMAP_THRESHOLD = 32 << 20


def limit_heap_retention() -> bool:
    """Serve allocations of 32 MiB and more (large response bodies, whole matrices) from their
    own mappings, returned to the system when freed (glibc only; skipped when the operator set
    ``MALLOC_MMAP_THRESHOLD_``).

    By default glibc raises its mmap threshold to the largest block freed so far, after which
    big buffers come from heaps it keeps and fragments. The threshold stays above a block of
    the capture (``model.capture.BLOCK_BUDGET_BYTES / BLOCK_TEMPORARIES`` = 12 MiB): a block's
    temporaries come and go dozens of times per layer, and from fresh mappings each one costs
    its page faults again; at 4 MiB the page's request at 2,048 tokens on a SmolLM2-135M
    shape took 20.5-23.2 s over HTTP against 13.9-14.5 s at 32 MiB (2 threads). In
    bench/load_test.sh (N=1000 ROUNDS=3, texts up to 256 tokens) the server's RSS after the
    third round was 404 MiB at a 4 MiB threshold, 429 MiB at 16 MiB, 418 MiB at 32 MiB.
    """
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD))
    except (OSError, AttributeError):  # not glibc
        return False


def load_service(settings: Settings) -> service.Service:
    lm = load_model(settings.checkpoint_path, settings.device, settings.dtype)
    limits = {"max_text_chars": settings.text_limit(), "max_matrix_cells": settings.max_matrix_cells}
    return service.build_service(lm, limits=limits)


@asynccontextmanager
async def lifespan(app: FastAPI):
    state: AppState = app.state.attnscope
    settings = state.settings
    configure_torch(settings)
    limit_heap_retention()
    state.semaphore = anyio.Semaphore(settings.concurrency)
    try:
        svc = await anyio.to_thread.run_sync(load_service, settings)
    except CheckpointError as e:
        # the server logs this one line (LifespanErrorMiddleware) and exits non-zero
        state.startup_error = f"attnscope: cannot start: {one_line(e)}"
        raise
    state.service = svc
    info = svc.info
    log.info(
        "attnscope: loaded %s (%d layers x %d heads, context %d) on %s; %d torch threads, %d at once",
        info["checkpoint"],
        info["n_layer"],
        info["n_head"],
        info["block_size"],
        info["device"],
        torch.get_num_threads(),
        settings.concurrency,
    )
    try:
        yield
    finally:
        state.service = None


# ------------------------------------------------------------------ the app

ERRORS_GET = {503: {"model": ErrorResponse, "description": "the model is not loaded yet"}}
ERRORS_POST = {
    413: {"model": ErrorResponse, "description": "request body over the limit"},
    422: {"model": ErrorResponse, "description": "invalid input; detail names the field and the limit"},
    **ERRORS_GET,
}


def _server_timing(timings: dict[str, float]) -> dict[str, str]:
    return {
        "Server-Timing": ", ".join(f"{name};dur={value:.2f}" for name, value in timings.items()),
        "X-Timing-Ms": f"{timings['total']:.2f}",
    }


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    state = AppState(settings)
    AttentionRequest = attention_request_model(settings.text_limit())

    # FastAPI with /docs (Swagger UI 5) served from the fastapi-offline package: the API page
    # works with no network, as the app does
    app = FastAPIOffline(
        title="attnscope",
        version="0.1.0",
        summary="See attention in a causal transformer: our small trained GPT, or any local transformers model",
        description="Every layer and head of a causal transformer: masks, raw and scaled "
        "scores, patterns, statistics and next-token predictions. Dimension order everywhere: "
        "[layer][head][query][key].",
        lifespan=lifespan,
        default_response_class=ORJSONResponse,
        docs_url="/docs",
        redoc_url=None,  # ReDoc's bundle fetches from cdn.redoc.ly even when served locally
    )
    app.state.attnscope = state
    install_error_handlers(app)

    def get_service() -> service.Service:
        if state.service is None:
            raise StarletteHTTPException(503, "the model is not loaded yet")
        return state.service

    async def run_limited(fn, *args):
        assert state.semaphore is not None
        async with state.semaphore:
            return await anyio.to_thread.run_sync(fn, *args)

    router = APIRouter(route_class=StrictJSONRoute)

    @router.get("/healthz", response_model=Health, tags=["health"], summary="The process is running")
    async def healthz() -> ORJSONResponse:
        return ORJSONResponse({"status": "ok"})

    @router.get(
        "/readyz",
        response_model=Health,
        responses=ERRORS_GET,
        tags=["health"],
        summary="The model is loaded (503 before)",
    )
    async def readyz() -> ORJSONResponse:
        if not state.ready:
            return ORJSONResponse({"detail": "the model is not loaded yet"}, status_code=503)
        return ORJSONResponse({"status": "ready"})

    # HEAD for probes and load balancers that send it: the status of GET, no body, not in the schema
    @router.head("/healthz", include_in_schema=False)
    async def healthz_head() -> Response:
        return Response(status_code=200)

    @router.head("/readyz", include_in_schema=False)
    async def readyz_head() -> Response:
        return Response(status_code=200 if state.ready else 503)

    @router.get("/api/model", response_model=ModelInfo, responses=ERRORS_GET, tags=["model"])
    async def get_model(svc: service.Service = Depends(get_service)) -> RawJSONResponse:
        """The loaded model: architecture, device, parameter count, checkpoint, training metrics."""
        return RawJSONResponse(svc.info_json)

    @router.post("/api/attention", response_model=AttentionResponse, responses=ERRORS_POST, tags=["model"])
    async def attention(body: AttentionRequest, svc: service.Service = Depends(get_service)) -> RawJSONResponse:
        """Run the text through the model and return what each requested layer and head computed.

        `include`, `layers` and `heads` select what is computed and sent: the all-heads
        grid wants `["pattern", "stats"]`, a single-head view every field for one head.
        """
        started = time.perf_counter()
        content, timings = await run_limited(service.attention_json, svc, body, started)
        return RawJSONResponse(content, headers=_server_timing(timings))

    @router.get("/api/heads", response_model=HeadsResponse, responses=ERRORS_GET, tags=["model"])
    async def heads(svc: service.Service = Depends(get_service)) -> RawJSONResponse:
        """Role scores per head (previous-token, first-token, induction, self), computed at startup."""
        return RawJSONResponse(svc.heads_json)

    @router.post(
        "/api/lessons/bag-of-words", response_model=BagOfWordsResponse, responses=ERRORS_POST, tags=["lessons"]
    )
    async def bag_of_words(body: BagOfWordsRequest, svc: service.Service = Depends(get_service)) -> ORJSONResponse:
        """Causal running mean three ways (loop, `tril` matmul, masked softmax): all agree."""
        result = await run_limited(service.lesson_bag_of_words, body.T, body.C, body.seed, body.draw, body.B)
        return ORJSONResponse(result)

    @router.post(
        "/api/lessons/softmax-scaling",
        response_model=SoftmaxScalingResponse,
        responses=ERRORS_POST,
        tags=["lessons"],
    )
    async def softmax_scaling(
        body: SoftmaxScalingRequest, svc: service.Service = Depends(get_service)
    ) -> ORJSONResponse:
        """Softmax of the logits and of the logits × factor: larger spread, peakier weights."""
        return ORJSONResponse(await run_limited(service.lesson_softmax_scaling, body.logits, body.factor))

    @router.post("/api/lessons/variance", response_model=VarianceResponse, responses=ERRORS_POST, tags=["lessons"])
    async def variance(body: VarianceRequest, svc: service.Service = Depends(get_service)) -> ORJSONResponse:
        """Variance of q·kᵀ for unit-variance q and k: about head_size, about 1 once scaled."""
        result = await run_limited(service.lesson_variance, body.head_size, body.T, body.seed, body.samples)
        return ORJSONResponse(result)

    routes_ablation.install(router, state, get_service, run_limited, ERRORS_POST, settings.text_limit())
    app.include_router(router)

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    async def plotly_js() -> FileResponse:
        if not PLOTLY_JS.is_file():
            raise StarletteHTTPException(404, "plotly is not installed")
        return FileResponse(PLOTLY_JS, media_type="text/javascript", headers={"Cache-Control": LONG_CACHE})

    app.mount(
        "/",
        FrontendFiles(directory=FRONTEND_DIR, html=True, api_routes=lambda: [*router.routes, *app.routes]),
        name="frontend",
    )

    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=GZIP_LEVEL)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type"],
            expose_headers=["Server-Timing", "X-Timing-Ms"],
        )
    app.add_middleware(BodySizeLimitMiddleware, max_body_bytes=settings.body_limit())
    app.add_middleware(LifespanErrorMiddleware, state=state)
    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory attnscope.app.main:create_app_from_env`` (settings from the environment)."""
    return create_app(Settings())
