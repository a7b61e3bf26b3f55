"""Static files: nothing outside ``frontend/`` can be read, however the path is spelled; the page
stays served when a reinstall removes the folder under a running server."""

from __future__ import annotations

import shutil

import pytest
from attnscope.app import static
from attnscope.app.main import create_app
from attnscope.app.static import FRONTEND_DIR

from tests.kit.app import asgi_get, status_of

SECRETS = (b"[project]", b"root:", b"def create_app", b"import ")

TRAVERSALS = [
    b"/../pyproject.toml",
    b"/../../../../../../etc/passwd",
    b"/%2e%2e/pyproject.toml",
    b"/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
    b"/.%2e/app/main.py",
    b"/js/../../pyproject.toml",
    b"/js/..%2f..%2fpyproject.toml",
    b"/..%2fpyproject.toml",
    b"/%2e%2e%2fapp%2fmain.py",
    b"/..%5cpyproject.toml",
    b"/..\\..\\pyproject.toml",
    b"//etc/passwd",
    b"/%2fetc%2fpasswd",
    b"/%00/../pyproject.toml",
    b"/index.html%00.py",
    b"/__init__.py",
    b"/%5f%5finit%5f%5f.py",
]


@pytest.fixture(scope="module")
def static_app(tmp_path_factory):
    from attnscope.app.settings import Settings

    # static files need no model: an app whose lifespan never runs
    return create_app(Settings(checkpoint=tmp_path_factory.mktemp("none") / "missing"))


@pytest.mark.parametrize("raw_path", TRAVERSALS, ids=[p.decode("latin-1") for p in TRAVERSALS])
def test_traversal_through_asgi(static_app, raw_path):
    status, body = asgi_get(static_app, raw_path)
    assert status in (400, 404), (status, body[:200])
    assert not any(secret in body for secret in SECRETS)


@pytest.mark.parametrize("raw_path", TRAVERSALS, ids=[p.decode("latin-1") for p in TRAVERSALS])
def test_traversal_through_a_real_server(live_server, raw_path):
    raw = live_server.raw(b"GET " + raw_path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(raw) in (400, 404), raw[:300]
    assert not any(secret in raw for secret in SECRETS)


def test_files_inside_are_served(static_app):
    index = FRONTEND_DIR / "index.html"
    status, body = asgi_get(static_app, b"/")
    assert status == 200
    assert body == index.read_bytes()
    status, body = asgi_get(static_app, b"/js/../index.html")  # stays inside: fine
    assert status == 200


@pytest.mark.parametrize("asked_before", [True, False], ids=["served-before", "first-request-after"])
def test_a_reinstall_under_a_running_server_keeps_the_page(tmp_path, monkeypatch, asked_before):
    """``pip install -e .`` over ``pip install .`` removes ``site-packages/attnscope`` (pip moves it
    away, then deletes it) while the server started from there runs on: its page and modules are
    still served, as they were at start; a file that never was there is still a 404."""
    from attnscope.app.settings import Settings

    package = tmp_path / "site-packages" / "attnscope"
    shutil.copytree(FRONTEND_DIR, package / "frontend", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(static, "FRONTEND_DIR", package / "frontend")
    app = create_app(Settings(checkpoint=tmp_path / "missing"))
    if asked_before:
        assert asgi_get(app, b"/")[0] == 200

    package.rename(tmp_path / "pip-uninstall-stash")
    for raw_path, name in [(b"/", "index.html"), (b"/js/state.js", "js/state.js"), (b"/style.css", "style.css")]:
        status, body = asgi_get(app, raw_path)
        assert status == 200, (raw_path, status, body[:200])
        assert body == (FRONTEND_DIR / name).read_bytes()
    assert asgi_get(app, b"/js/not-there.js")[0] == 404
    assert asgi_get(app, b"/__init__.py")[0] == 404


def test_vendor_plotly_cannot_be_used_to_escape(static_app):
    for raw_path in (b"/vendor/../pyproject.toml", b"/vendor/plotly.min.js/../../pyproject.toml"):
        status, body = asgi_get(static_app, raw_path)
        assert status == 404
        assert b"[project]" not in body


def test_health_answers_head_requests(client):
    for path in ("/healthz", "/readyz"):
        r = client.head(path)
        assert r.status_code == 200, path
        assert r.content == b""


def test_head_readyz_is_503_until_the_model_is_loaded(unstarted_client):
    assert unstarted_client.head("/readyz").status_code == 503
    assert unstarted_client.head("/healthz").status_code == 200


def test_head_routes_stay_out_of_the_schema(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths["/healthz"]) == {"get"} and set(paths["/readyz"]) == {"get"}
