"""JSON responses encoded with orjson (numpy arrays included, NaN written as ``null``).

FastAPI deprecates its own ``ORJSONResponse``; this one is ours. Routes that build large
bodies encode them in a worker thread and hand the bytes to :class:`RawJSONResponse`.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse, Response

OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def dumps(content: Any) -> bytes:
    """orjson with numpy support: arrays must be C-contiguous; NaN and ±inf become ``null``."""
    return orjson.dumps(content, option=OPTIONS)


class ORJSONResponse(JSONResponse):
    """``JSONResponse`` rendered by orjson."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


class RawJSONResponse(Response):
    """A body that is already JSON bytes."""

    media_type = "application/json"
