"""What the lens, knockout and patching service tests share: two served models (the GPT-2 export of
our GPT and a Llama with grouped-query attention; tests/app/conftest.py's ``clients`` serves them),
their oracles and a 422 helper."""

from __future__ import annotations

import pytest

from tests.kit.interventions import ORACLE, build_model, oracle_model, register_oracle

SERVED = ("gpt2-export", "llama")


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    """The :data:`SERVED` models' folders (tests/app/conftest.py's ``clients`` serves them)."""
    root = tmp_path_factory.mktemp("served")
    return {name: build_model(name, root) for name in SERVED}


@pytest.fixture(scope="module")
def oracles(family_dirs):
    return {name: oracle_model(path) for name, path in family_dirs.items()}


@pytest.fixture(scope="module")
def knock_oracles(family_dirs):
    register_oracle()
    return {name: oracle_model(path, ORACLE) for name, path in family_dirs.items()}


def refused(client, url: str, body: dict, loc: list) -> dict:
    """POST, assert a 422 whose one error names ``loc``; return the error."""
    r = client.post(url, json=body)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", *loc], error
    return error
