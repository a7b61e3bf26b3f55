"""The one place that turns failures into responses. Every error body is ``{"detail": ...}``.

* :class:`ApiError`, raised by the service for input the schema cannot judge (too many
  tokens, a layer the model does not have): its status, detail a list of one item.
* ``RequestValidationError`` (pydantic, or a body that is not JSON): 422, detail a list of
  ``{"type", "loc", "msg", "ctx"}`` items; ``loc`` names the field, ``ctx`` the limit.
  The offending input is not echoed back.
* :class:`model.lessons.LessonArgumentError` (a lesson argument out of range, found by the
  model code that also serves notebooks): 422, ``loc`` naming the argument.
* :class:`model.options.NoKeyLeft` (knocked-out ``edges`` that leave a row no key, found as the model runs):
  422 ``no_key_left`` naming ``edges``.
* Starlette ``HTTPException`` (404, 405, ...): its status, detail a string.
* Anything else: 500 ``{"detail": "internal server error"}``, logged with its traceback in the
  server log, never in the body.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..model.lessons import LessonArgumentError
from ..model.options import NoKeyLeft
from .responses import ORJSONResponse


def one_line(text: object) -> str:
    """``text`` with every run of whitespace (newlines too) made one space: how every error is said."""
    return " ".join(str(text).split())

log = logging.getLogger("attnscope")


def error_item(type_: str, loc: Sequence[str | int], msg: str, ctx: dict[str, Any] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": type_, "loc": list(loc), "msg": msg}
    if ctx:
        item["ctx"] = _json_safe(ctx)
    return item


def body_too_large_item(
    count: int, limit: int, max_bytes: int | None = None, read: bool = False, part: str = "image"
) -> dict[str, Any]:
    """The 413 item of a request body over its route's ``limit`` (``count`` bytes declared, or, when
    ``read``, the bytes read when it ran over). On a route that takes an ``image`` of an image-text
    model (``max_bytes``, GET /api/model ``image_limits.max_bytes``), or the ``audio`` of a speech model
    (``audio_limits.max_bytes``), the limit is the text's and that ``part``'s in base64: the item names
    the part and its ``max_bytes``."""
    size = f"is over the limit of {limit:,} bytes" if read else f"is {count:,} bytes; the limit is {limit:,} bytes"
    ctx = {"limit": limit, "count": count}
    if max_bytes is None:
        return error_item("body_too_large", ("body",), f"the request body {size}", ctx)
    msg = (
        f"the request body {size}: {part} is at most {max_bytes:,} bytes (max_bytes of {part}_limits in "
        f"GET /api/model), {4 * -(-max_bytes // 3):,} characters of base64, beside the text"
    )
    return error_item("body_too_large", ("body", part), msg, ctx | {"max_bytes": max_bytes})


class ApiError(Exception):
    """A client error found after validation; ``loc`` names the field as pydantic would."""

    def __init__(
        self,
        status_code: int,
        msg: str,
        *,
        loc: Sequence[str | int] = ("body",),
        type_: str = "value_error",
        ctx: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(msg)
        self.status_code = status_code
        self.detail = [error_item(type_, loc, msg, ctx)]


JSON_INT_RANGE = range(-(2**63), 2**64)  # what orjson writes as a number


def _json_safe(value: Any) -> Any:
    """A value an error may name, as JSON can carry it: numbers JSON cannot hold become strings."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if value in JSON_INT_RANGE else str(value)
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    return str(value)


# what pydantic puts in a location for the arm of a union it tried (`query: int | list[int]` fails as
# ["edges", 0, "query", "constrained-int"]): not a field, so not part of the name a client reads
_TYPE_NAMES = frozenset({"int", "float", "str", "bool", "list", "dict", "none", "is-instance", "lax-or-strict"})


def _is_union_arm(part: object) -> bool:
    return isinstance(part, str) and ("[" in part or "-" in part or part in _TYPE_NAMES)


VALUE_ERROR_PREFIX = "Value error, "  # what pydantic puts before a validator's ValueError message


def clean_validation_errors(errors: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """pydantic/FastAPI error dicts -> ``{"type", "loc", "msg", "ctx"}`` with JSON-safe values, each
    location the field's own path (a union's arm names left out), a validator's message without
    pydantic's "Value error, " before it; each error once (a body read by the route and by its subject's
    dependency is validated by both: :func:`attnscope.app.deps.subject_dep`)."""
    out: list[dict[str, Any]] = []
    for err in errors:
        type_ = str(err.get("type", "value_error"))
        loc = [
            part if isinstance(part, (int, str)) else str(part)
            for part in err.get("loc", ())
            if not _is_union_arm(part)
        ]
        msg = str(err.get("msg", "invalid input"))
        if type_ == "value_error" and msg.startswith(VALUE_ERROR_PREFIX):  # our validators' own words, as written
            msg = msg[len(VALUE_ERROR_PREFIX) :]
        ctx = _json_safe(err.get("ctx")) if err.get("ctx") else None
        if type_ == "json_invalid":
            reason = (ctx or {}).get("error", "not valid JSON")
            msg = f"the body is not valid JSON: {reason}"
        item = error_item(type_, loc, msg, ctx)
        if item not in out:
            out.append(item)
    return out


async def _api_error(request: Request, exc: ApiError) -> ORJSONResponse:
    return ORJSONResponse({"detail": exc.detail}, status_code=exc.status_code)


async def _validation_error(request: Request, exc: RequestValidationError) -> ORJSONResponse:
    return ORJSONResponse({"detail": clean_validation_errors(exc.errors())}, status_code=422)


async def _http_error(request: Request, exc: StarletteHTTPException) -> ORJSONResponse:
    return ORJSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _server_error(request: Request, exc: Exception) -> ORJSONResponse:
    log.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
    return ORJSONResponse({"detail": "internal server error"}, status_code=500)


async def _lesson_argument_error(request: Request, exc: LessonArgumentError) -> ORJSONResponse:
    return ORJSONResponse({"detail": [error_item("value_error", ("body", exc.field), str(exc))]}, status_code=422)


async def _no_key_left(request: Request, exc: NoKeyLeft) -> ORJSONResponse:
    """Knocked-out edges (the subject's ``edges``) that leave a row of some head no key: found as the model runs."""
    ctx = {"layer": exc.layer, "head": exc.head, "query": exc.query}
    return ORJSONResponse({"detail": [error_item("no_key_left", ("body", "edges"), str(exc), ctx)]}, status_code=422)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(LessonArgumentError, _lesson_argument_error)
    app.add_exception_handler(NoKeyLeft, _no_key_left)
    app.add_exception_handler(Exception, _server_error)
