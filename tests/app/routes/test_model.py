"""Models by their Hugging Face name on the command line, in the settings and over the API:
``--model ORG/NAME``, ``ATTNSCOPE_MODEL``, ``attnscope models`` and ``GET /api/models``, over a
Hub cache the test writes (no network)."""

from __future__ import annotations

import json

import pytest
from attnscope.app.cli.main import main
from attnscope.app.main import create_app
from attnscope.app.settings import Settings
from fastapi.testclient import TestClient

pytest.importorskip("transformers")

from tests.kit.family import build  # noqa: E402
from tests.kit.hub import put_in_cache  # noqa: E402

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
        assert listed[0]["size_bytes"] > 0 and listed[0]["path"].startswith("models--tiny-org--tiny-qwen/snapshots/")


def test_a_notebook_names_the_model_as_from_pretrained_does(offline_hub):
    from attnscope.app.notebook import capture

    cap = capture(TEXT, model="tiny-org/tiny-qwen")
    assert cap["model"]["name"] == "tiny-org/tiny-qwen"


def wait_for(c, predicate, timeout=60.0):
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        body = c.get("/api/models").json()
        if predicate(body):
            return body
        time.sleep(0.05)
    raise AssertionError(f"not reached: {body}")


def test_a_served_model_switches_to_another_on_this_machine_and_back(
    offline_hub, checkpoint_dir, tmp_path, monkeypatch
):
    """POST /api/model: only a model GET /api/models lists, only when it fits beside the current
    one; 202 at once, the current model answering until the new one is loaded; a model that
    fails to load is said and the current one stays."""
    with TestClient(create_app(Settings(checkpoint=checkpoint_dir, device="cpu", torch_threads=1))) as c:
        started = c.get("/api/model").json()["name"]
        listed = c.get("/api/models").json()
        assert listed["serving"] == started and listed["switch"] is None
        assert [m["name"] for m in listed["models"]][:2] == [started, "tiny-org/tiny-qwen"]
        r = c.post("/api/model", json={"name": "tiny-org/nowhere"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "name"]
        assert "tiny-org/tiny-qwen" in r.json()["detail"][0]["msg"]  # what this machine has
        # too big for the memory left: said with both sizes, nothing changes
        monkeypatch.setattr("attnscope.app.compute.switch.available_bytes", lambda device: 1024)
        r = c.post("/api/model", json={"name": "tiny-org/tiny-qwen"})
        assert r.status_code == 507 and "GiB" in r.json()["detail"][0]["msg"]
        monkeypatch.undo()
        monkeypatch.setenv("HF_HUB_CACHE", str(offline_hub))
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        r = c.post("/api/model", json={"name": "tiny-org/tiny-qwen"})
        assert r.status_code == 202 and r.json() == {"name": "tiny-org/tiny-qwen", "status": "loading"}
        wait_for(c, lambda b: b["serving"] == "tiny-org/tiny-qwen" and b["switch"] is None)
        info = c.get("/api/model").json()
        assert info["name"] == "tiny-org/tiny-qwen" and info["family"] == "qwen2"
        assert c.post("/api/attention", json={"text": TEXT, "top_k": 1}).status_code == 200
        # and back to the model it started with
        assert c.post("/api/model", json={"name": started}).status_code == 202
        wait_for(c, lambda b: b["serving"] == started)
        assert c.post("/api/model", json={"name": started}).json()["status"] == "serving"


def test_a_model_that_fails_to_load_is_said_and_the_current_one_stays(checkpoint_dir, tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    put_in_cache(cache, "tiny-org/broken", broken)  # a causal LM's config, and no weights
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with TestClient(create_app(Settings(checkpoint=checkpoint_dir, device="cpu", torch_threads=1))) as c:
        started = c.get("/api/model").json()["name"]
        assert c.post("/api/model", json={"name": "tiny-org/broken"}).status_code == 202
        body = wait_for(c, lambda b: b["switch"] and b["switch"]["status"] == "failed")
        assert body["serving"] == started and body["switch"]["name"] == "tiny-org/broken"
        assert "tokenizer" in body["switch"]["error"] or "weights" in body["switch"]["error"]
        assert c.get("/api/model").json()["name"] == started


def test_asking_for_the_served_model_while_another_loads_cancels_that_switch(offline_hub, checkpoint_dir, monkeypatch):
    """Two switches race: A is served, B is loading, then A is asked for. The answer is "serving A"
    naming the cancelled B, and it holds: B, once loaded, is dropped, never served. While B's load
    finishes, another switch is a 409 (one load at a time); after it, switches work again."""
    import threading

    from attnscope.app import lifespan

    release = threading.Event()
    real_load = lifespan.load_service

    def slow_load(settings):
        assert release.wait(60)
        return real_load(settings)

    with TestClient(create_app(Settings(checkpoint=checkpoint_dir, device="cpu", torch_threads=1))) as c:
        monkeypatch.setattr(lifespan, "load_service", slow_load)  # the switches' loads, not the start's
        state = c.app.state.attnscope
        started = c.get("/api/model").json()["name"]
        r = c.post("/api/model", json={"name": "tiny-org/tiny-qwen"})
        assert r.status_code == 202 and r.json()["status"] == "loading"
        r = c.post("/api/model", json={"name": started})
        assert r.status_code == 202
        assert r.json() == {"name": started, "status": "serving", "cancelled": "tiny-org/tiny-qwen"}
        listed = c.get("/api/models").json()
        assert listed["serving"] == started and listed["switch"] is None
        r = c.post("/api/model", json={"name": "tiny-org/tiny-qwen"})
        assert r.status_code == 409 and "tiny-org/tiny-qwen" in r.json()["detail"][0]["msg"]
        release.set()
        wait_for(c, lambda b: state.switch_job is None)
        assert c.get("/api/model").json()["name"] == started
        assert c.get("/api/models").json() == {**listed, "serving": started, "switch": None}
        assert c.post("/api/attention", json={"text": TEXT, "top_k": 1}).json()["model"]["name"] == started
        # nothing is pending now: the served model is just served, and a switch goes through
        served = c.post("/api/model", json={"name": started}).json()
        assert served == {"name": started, "status": "serving", "cancelled": None}
        assert c.post("/api/model", json={"name": "tiny-org/tiny-qwen"}).status_code == 202
        wait_for(c, lambda b: b["serving"] == "tiny-org/tiny-qwen" and b["switch"] is None)
