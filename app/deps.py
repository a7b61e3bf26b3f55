"""What every route depends on: the app's state and loaded service, a request's subject resolved once
(``Annotated`` dependencies), the strict JSON body parsing, and the error answers the OpenAPI document
lists per route."""

import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from .lifespan import AppState
from .schemas.common import ErrorResponse
from .service import Service
from .subject import Prompt, subject_of

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


def subject_dep(
    model: type, text: str = "text", messages: str | None = "messages", resolve: Callable[..., Prompt] | None = None
) -> Any:
    """``Annotated[Prompt, Depends(...)]``: the subject of a body of ``model`` resolved once, before the route
    runs (:func:`~attnscope.app.subject.subject_of`, with ``text`` and ``messages`` the fields' names in a
    request with two subjects; ``resolve(svc, body)`` where a route lays its subject out otherwise), in a
    worker thread under the server's semaphore, as every computation. The dependency reads the body by the
    route's own parameter's name, ``body``, so the body stays the request's whole JSON object; an error
    resolving it is the same 422 naming the field, answered by :mod:`attnscope.app.errors`."""

    def resolved(svc: Service, body: Any) -> Prompt:
        return subject_of(svc, body, text, messages) if resolve is None else resolve(svc, body)

    async def subject(body: model, svc: ServiceDep, state: StateDep) -> Prompt:  # type: ignore[valid-type]
        return await state.run(resolved, svc, body)

    return Annotated[Prompt, Depends(subject)]


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
