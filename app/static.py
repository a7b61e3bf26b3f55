"""The page's files: ``frontend/`` mounted at ``/`` (after the API routes), and
``/vendor/plotly.min.js`` served from the installed ``plotly`` package."""

from __future__ import annotations

import mimetypes
from pathlib import Path

from fastapi import APIRouter, FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from .. import frontend

FRONTEND_DIR = Path(frontend.__file__).parent
PLOTLY_JS = Path(__import__("plotly").__file__).parent / "package_data" / "plotly.min.js"
LONG_CACHE = "public, max-age=31536000, immutable"

router = APIRouter()


@router.get("/vendor/plotly.min.js", include_in_schema=False)
async def plotly_js() -> FileResponse:
    if not PLOTLY_JS.is_file():
        raise StarletteHTTPException(404, "plotly is not installed")
    return FileResponse(PLOTLY_JS, media_type="text/javascript", headers={"Cache-Control": LONG_CACHE})


class FrontendFiles(StaticFiles):
    """``frontend/`` at ``/``. Only GET/HEAD of files inside it; Python files are not served.

    A path that belongs to an API route but came with the wrong method gets 405 with the
    route's ``Allow`` header (the mount would otherwise swallow it), and unknown ``/api/``
    paths a JSON 404.

    Files are served from the folder (an edit shows on the next reload) and also read once at
    start. Reinstalling under a running server (``pip install -e .`` over ``pip install .``)
    removes the folder it was started from, and the process cannot follow the package to its
    new place (its import path was set at start): a file the folder no longer has is served as
    it was at start, the version that goes with the Python code the server runs.
    """

    HIDDEN_SUFFIXES = (".py", ".pyc")

    def __init__(self, *, api_routes, **kwargs) -> None:
        super().__init__(**kwargs)
        self.api_routes = api_routes
        self.at_start = self.read_files(Path(self.directory))

    @classmethod
    def read_files(cls, directory: Path) -> dict[str, bytes]:
        """Every file under ``directory`` that may be served, by its path there (``js/state.js``)."""
        return {
            path.relative_to(directory).as_posix(): path.read_bytes()
            for path in sorted(directory.rglob("*"))
            if path.is_file() and not path.name.endswith(cls.HIDDEN_SUFFIXES) and "__pycache__" not in path.parts
        }

    async def check_config(self) -> None:
        """Nothing left to check: the folder was read at start (StaticFiles' own check, on the
        first request, would fail once a reinstall had removed the folder)."""

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
        try:
            return await super().get_response(path, scope)
        except StarletteHTTPException as missing:
            # ``path`` comes normalised by StaticFiles; "." is the folder itself
            name = "index.html" if path == "." else path
            if missing.status_code != 404 or name not in self.at_start:
                raise
            media_type = mimetypes.guess_type(name)[0] or "text/plain"
            return Response(self.at_start[name], media_type=media_type)


def mount_frontend(app: FastAPI, api_routes: list[BaseRoute]) -> None:
    """``frontend/`` at ``/``, after the API routes: ``api_routes`` (the included routers' routes) and
    the app's own (``/docs``, ``/openapi.json``) answer a wrong method with 405 instead of the mount."""
    files = FrontendFiles(directory=FRONTEND_DIR, html=True, api_routes=lambda: [*api_routes, *app.routes])
    app.mount("/", files, name="frontend")
