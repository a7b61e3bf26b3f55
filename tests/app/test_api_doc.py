"""docs/API.md names only what the server serves: every path it writes in code (``GET /api/model``,
``/docs``) is a route of the app (with that method, where it names one), or a page that answers 200."""

from __future__ import annotations

import re
from pathlib import Path

API_MD = Path(__file__).resolve().parents[2] / "docs" / "API.md"
# `GET /api/x`, `POST /api/x/{layer}` or a bare `/docs`, inside backticks or after a heading's ##
NAMED = re.compile(r"(?:`|^#+ )(?:(GET|POST) )?(/[A-Za-z0-9_./{}-]*)(?=`|$)", re.MULTILINE)


def named_paths() -> set[tuple[str | None, str]]:
    return {(method or None, path) for method, path in NAMED.findall(API_MD.read_text(encoding="utf-8"))}


def test_the_doc_names_paths():
    """The pattern reads the doc: it finds the endpoints it describes (so the test below is not empty)."""
    names = named_paths()
    assert ("GET", "/api/model") in names and ("POST", "/api/attention") in names and (None, "/docs") in names


def test_every_path_the_doc_names_is_served(client):
    schema = client.get("/openapi.json").json()["paths"]
    missing = []
    for method, path in sorted(named_paths(), key=str):
        if path in schema:
            if method is not None and method.lower() not in schema[path]:
                missing.append(f"{method} {path} (the path serves {sorted(schema[path])})")
        elif method not in (None, "GET") or client.get(path).status_code != 200:
            missing.append(f"{method or 'GET'} {path}")
    assert not missing, f"docs/API.md names what the server does not serve: {missing}"
