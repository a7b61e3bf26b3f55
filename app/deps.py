"""What every route depends on: the app's state and loaded service (``Annotated`` dependencies),
the strict JSON body parsing, and the error answers the OpenAPI document lists per route."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from .lifespan import AppState
from .schemas.common import ErrorResponse
from .service import Service

ERRORS_GET = {503: {"model": ErrorResponse, "description": "the model is not loaded yet"}}
ERRORS_POST = {
    413: {"model": ErrorResponse, "description": "request body over the limit"},
    422: {"model": ErrorResponse, "description": "invalid input; detail names the field and the limit"},
    **ERRORS_GET,
}


def get_state(request: Request) -> AppState:
    return request.app.state.attnscope


def get_service(request: Request) -> Service:
    """The loaded service; a 503 while the model is not loaded yet."""
    svc = get_state(request).service
    if svc is None:
        raise StarletteHTTPException(503, "the model is not loaded yet")
    return svc


StateDep = Annotated[AppState, Depends(get_state)]
ServiceDep = Annotated[Service, Depends(get_service)]


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
    """A route whose body is read by :class:`StrictJSONRequest`."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def strict_handler(request: Request):
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler
