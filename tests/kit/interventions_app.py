"""What the lens, knockout and patching service tests share: two served models (the GPT-2 export of
our GPT and a Llama with grouped-query attention; tests/app/conftest.py's ``clients`` serves them,
the oracles of tests/kit/interventions.py, imported here, open them) and a 422 helper."""

from __future__ import annotations

import pytest

from tests.kit.interventions import build_model, knock_oracles, oracles  # noqa: F401  (fixtures of these dirs)

SERVED = ("gpt2-export", "llama")


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    """The :data:`SERVED` models' folders (tests/app/conftest.py's ``clients`` serves them)."""
    root = tmp_path_factory.mktemp("served")
    return {name: build_model(name, root) for name in SERVED}


def refused(client, url: str, body: dict, loc: list) -> dict:
    """POST, assert a 422 whose one error names ``loc``; return the error."""
    r = client.post(url, json=body)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", *loc], error
    return error
