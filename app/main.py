"""The FastAPI application: ``create_app(settings)`` builds it, and only that.

* the model is loaded once, in ``lifespan`` (:mod:`.lifespan`; head role scores computed then too);
  ``/readyz`` says 503 until that is done, the model endpoints say 503 as well;
* the routes live in :mod:`.routes`, one module per resource (health, model, attention, effects,
  generation, lessons); each validates its body (pydantic, :mod:`.schemas`), then runs a plain
  function of :mod:`.compute` in a worker thread, under a semaphore that bounds how many run at
  once, so the event loop (and ``/healthz``) stays responsive while long requests compute;
* one place maps errors to HTTP answers (:mod:`.errors`);
* the static browser app (``frontend/``) is mounted at ``/`` after the API routes, and
  ``/vendor/plotly.min.js`` is served from the installed ``plotly`` package (:mod:`.static`);
* ``/docs`` loads Swagger UI from the installed ``fastapi-offline`` package, never from a CDN
  (ReDoc is left out: its bundle calls cdn.redoc.ly);
* middleware, outermost first: body size limit (413), CORS (only if origins are
  configured), compression (zstd or gzip, as the client accepts: :mod:`.compression`).
"""

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi_offline import FastAPIOffline

from . import static
from .compression import CompressionMiddleware
from .errors import install_error_handlers
from .lifespan import AppState, LifespanErrorMiddleware, lifespan
from .middleware import BodySizeLimitMiddleware
from .responses import ORJSONResponse
from .routes import api_routers
from .schemas.common import TEXT_CHARS
from .schemas.subject import parts_of
from .settings import Settings


def paths_taking(routes, part: str) -> frozenset[str]:
    """The paths whose request schema takes ``part`` of the subject (``image``, ``audio``): read from the
    schemas (:func:`~attnscope.app.schemas.subject.parts_of`), so which route takes what is said once, where
    the request is defined."""
    bodies = ((route.path, getattr(route, "body_field", None)) for route in routes)
    return frozenset(path for path, body in bodies if body and part in parts_of(body.field_info.annotation))


def image_paths() -> frozenset[str]:
    """The routes whose requests may carry an image."""
    return paths_taking([route for router in api_routers(TEXT_CHARS) for route in router.routes], "image")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
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
    state = AppState(settings)
    app.state.attnscope = state
    install_error_handlers(app)

    routers = [*api_routers(settings.text_limit()), static.router]
    for router in routers:
        app.include_router(router)
    static.mount_frontend(app, [route for router in routers for route in router.routes])

    app.add_middleware(CompressionMiddleware, minimum_size=1024)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type"],
            expose_headers=["Server-Timing", "X-Timing-Ms"],
        )
    part, upload_body_bytes, upload_max_bytes = settings.upload()
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_body_bytes=settings.body_limit(),
        upload_paths=paths_taking([route for router in routers for route in router.routes], part),
        upload_body_bytes=upload_body_bytes,
        upload_max_bytes=upload_max_bytes,
        upload_part=part,
    )
    app.add_middleware(LifespanErrorMiddleware, state=state)
    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory attnscope.app.main:create_app_from_env`` (settings from the environment)."""
    return create_app(Settings())
