"""Models by their Hugging Face name on the command line, in the settings and over the API:
``--model ORG/NAME``, ``ATTNSCOPE_MODEL``, ``attnscope models`` and ``GET /api/models``, over a
Hub cache the test writes (no network)."""

from __future__ import annotations

import json

import pytest
from attnscope.app.cli import main
from attnscope.app.main import create_app
from attnscope.app.settings import Settings
from fastapi.testclient import TestClient

pytest.importorskip("transformers")

from tests.familykit import build  # noqa: E402
from tests.hubkit import put_in_cache  # noqa: E402

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf") / "hub"
    put_in_cache(root, "tiny-org/tiny-qwen", build("qwen2", tmp_path_factory.mktemp("src") / "qwen2"))
    return root


@pytest.fixture
def offline_hub(hub_cache, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no LM Studio folder
    return hub_cache


def test_inspect_opens_a_model_by_its_name(offline_hub, capsys):
    assert main(["inspect", TEXT, "--model", "tiny-org/tiny-qwen", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["name"] == "tiny-org/tiny-qwen" and out["model"]["family"] == "qwen2"


def test_a_name_not_in_the_cache_offline_is_one_line_and_exit_1(offline_hub, capsys):
    assert main(["inspect", TEXT, "--model", "tiny-org/elsewhere"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "tiny-org/elsewhere is not in the Hugging Face cache" in err


def test_two_model_options_are_a_usage_error(offline_hub, checkpoint_dir, capsys):
    assert main(["inspect", TEXT, "--model", "tiny-org/tiny-qwen", "--checkpoint", str(checkpoint_dir)]) == 2
    assert "--model and --checkpoint" in capsys.readouterr().err


def test_models_lists_the_cache_with_the_command_that_opens_each(offline_hub, capsys):
    assert main(["models", "--json"]) == 0
    (hub,) = [m for m in json.loads(capsys.readouterr().out)["models"] if m["source"] == "hub-cache"]
    assert hub["name"] == "tiny-org/tiny-qwen" and hub["open_with"] == "attnscope serve --model tiny-org/tiny-qwen"
    assert main(["models"]) == 0
    assert "attnscope serve --model tiny-org/tiny-qwen" in capsys.readouterr().out


def test_the_server_opens_ATTNSCOPE_MODEL_and_lists_what_it_could_open(offline_hub, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_MODEL", "tiny-org/tiny-qwen")
    with TestClient(create_app(Settings(device="cpu", torch_threads=1))) as c:
        assert c.get("/api/model").json()["name"] == "tiny-org/tiny-qwen"
        listed = c.get("/api/models").json()["models"]
        assert [(m["name"], m["source"], m["status"]) for m in listed] == [("tiny-org/tiny-qwen", "hub-cache", "ok")]
        assert listed[0]["size_bytes"] > 0 and listed[0]["path"].startswith(str(offline_hub))


def test_a_notebook_names_the_model_as_from_pretrained_does(offline_hub):
    from attnscope.app.notebook import capture

    cap = capture(TEXT, model="tiny-org/tiny-qwen")
    assert cap["model"]["name"] == "tiny-org/tiny-qwen"
