"""``attnscope models`` lists the shipped model, as ``GET /api/models`` does on a server started with it,
even on a machine with no other model (no Hub cache, no Ollama, no LM Studio)."""

from __future__ import annotations

import json

import pytest
from attnscope.app.cli.main import main
from attnscope.model.ours.checkpoint import SHIPPED

pytestmark = pytest.mark.skipif(
    not (SHIPPED / "model.safetensors").is_file(), reason="the shipped checkpoint is not there yet"
)


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    for var in ("ATTNSCOPE_CHECKPOINT", "ATTNSCOPE_MODEL", "ATTNSCOPE_DEVICE"):
        monkeypatch.delenv(var, raising=False)


def test_models_lists_the_shipped_model_as_the_api_does(bare_machine, capsys):
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["models"]
    with TestClient(create_app(Settings(torch_threads=1))) as c:
        api = c.get("/api/models").json()["models"]
        served = c.get("/api/model").json()
    # the command line shows this machine's path; the API sends no absolute path, only the folder's name
    assert [m["path"] for m in listed] == [str(SHIPPED)] and [m["path"] for m in api] == [SHIPPED.name]
    assert api[0]["open_with"] == f"attnscope serve --checkpoint {SHIPPED.name}"
    assert listed[0]["open_with"] == f"attnscope serve --checkpoint {SHIPPED}"
    for key in ("name", "source", "size_bytes", "status"):
        assert listed[0][key] == api[0][key], key
    assert listed[0]["name"] == served["name"]
    params = listed[0]["parameters"]
    assert params > served["n_layer"] * served["d_model"] ** 2  # at least the attention weights


def test_the_table_shows_it(bare_machine, capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "no models found" not in out
    assert f"attnscope serve --checkpoint {SHIPPED}" in out and "1 model(s)" in out
