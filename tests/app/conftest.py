"""Fixtures for the service tests: a tiny checkpoint, apps over it, clients, a live server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from attnscope.app.main import create_app
from attnscope.app.settings import Settings
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.kit.app import LiveServer, build_checkpoint, served


@pytest.fixture(scope="session")
def checkpoint_dir(tmp_path_factory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")


@pytest.fixture(scope="session")
def settings(checkpoint_dir) -> Settings:
    return Settings(checkpoint=checkpoint_dir, device="cpu", torch_threads=1, max_concurrency=2)


@pytest.fixture(scope="session")
def app(settings) -> FastAPI:
    return create_app(settings)


@pytest.fixture(scope="session")
def client(app) -> Iterator[TestClient]:
    """A client over the started app (lifespan run: the model is loaded)."""
    with TestClient(app) as c:
        yield c


@pytest.fixture
def unstarted_client(settings) -> TestClient:
    """A client whose app never ran its lifespan: the model is not loaded."""
    return TestClient(create_app(settings), raise_server_exceptions=False)


@pytest.fixture
def live_app(settings) -> FastAPI:
    """A fresh app per test, so that a test may patch what its routes call."""
    return create_app(settings)


@pytest.fixture
def live_server(live_app) -> Iterator[LiveServer]:
    with LiveServer(live_app) as server:
        yield server


@pytest.fixture
def http(live_server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def family_dirs(request, tmp_path_factory) -> dict[str, Path]:
    """The module's ``FAMILIES`` (tests/kit/family.py names), each built into its own folder."""
    from tests.kit.family import build_all

    return build_all(request.module.FAMILIES, tmp_path_factory.mktemp("families"))


@pytest.fixture(scope="module")
def clients(family_dirs) -> Iterator[dict[str, TestClient]]:
    """A started client per family of the module."""
    with served(family_dirs) as out:
        yield out
