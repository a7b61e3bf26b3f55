"""``--models-dir`` (``ATTNSCOPE_MODELS_DIR``): its model folders are listed in ``GET /api/models``
and compared by name in ``/api/compare-models``; any path (inside it or not) is a 422 saying what is
accepted. No answer of ``GET /api/models`` or of the atlas routes holds an absolute path of the server."""

from __future__ import annotations

import pytest
from attnscope.app.main import create_app
from fastapi.testclient import TestClient

pytest.importorskip("pyarrow")

from tests.kit.app import build_checkpoint, compare_models  # noqa: E402
from tests.kit.atlas import two_atlases  # noqa: E402

TEXT = "The cat sat on the mat. The dog sat on the log."


def perturbed_copy(src, out):
    """``src`` with every weight moved a little: the same tokenizer and shape, other patterns."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, out)
    weights = load_file(out / "model.safetensors")
    torch.manual_seed(0)
    save_file({k: (v + 0.05 * torch.randn_like(v)).contiguous() for k, v in weights.items()}, out / "model.safetensors")
    return out


@pytest.fixture(scope="module")
def places(tmp_path_factory, checkpoint_dir):
    """A models dir with one model folder, a folder beside it (outside), a Hub cache, Ollama and home, empty."""
    root = tmp_path_factory.mktemp("places")
    models = root / "models"
    perturbed_copy(checkpoint_dir, models / "tiny-b")
    (models / "notes").mkdir()  # a folder without config.json: not a model
    build_checkpoint(root / "outside", seed=2)
    return root


@pytest.fixture(scope="module")
def served(places, settings, checkpoint_dir, tmp_path_factory):
    atlases = two_atlases(tmp_path_factory.mktemp("atlas"), checkpoint_dir)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(places / "hub"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("OLLAMA_MODELS", str(places / "no-ollama"))
        mp.setenv("HOME", str(places / "home"))
        update = {"models_dir": places / "models", "atlas": list(atlases)}
        with TestClient(create_app(settings.model_copy(update=update))) as c:
            yield c




def test_the_models_dir_is_listed_and_compared_by_name(served):
    body = served.get("/api/models").json()
    listed = body["models"]
    assert [m["name"] for m in listed if m["served"]] == [body["serving"]] == [listed[0]["name"]]
    mine = [m for m in listed if m["source"] == "models-dir"]
    assert [(m["name"], m["path"], m["status"]) for m in mine] == [("tiny-b", "tiny-b", "ok")]
    assert mine[0]["size_bytes"] > 0
    r = compare_models(served, text=TEXT, layer=1, head=0, model_b="tiny-b")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model_b"] == "tiny-b" and out["model_a"] != "tiny-b"
    assert max(max(row) for row in out["divergence"]) > 0  # another model's weights: the patterns differ


def test_the_model_the_server_started_with_is_accepted_by_its_name(served):
    first = served.get("/api/models").json()["models"][0]
    r = compare_models(served, text=TEXT, layer=1, head=0, model_b=first["name"])
    assert r.status_code == 200, r.text


def test_a_path_is_refused_saying_what_is_accepted(served, places):
    for model_b in (
        str(places / "outside"),  # a model folder outside the models dir
        str(places / "models" / "tiny-b"),  # inside it, but a path, not a name
        "../outside",
        "tiny-b/../../outside",
        "notes",  # in the models dir, but not a model
        "/etc",
    ):
        r = served.post("/api/compare-models", json={"text": TEXT, "layer": 0, "head": 0, "model_b": model_b})
        assert r.status_code == 422, (model_b, r.text)
        (item,) = r.json()["detail"]
        assert item["loc"] == ["body", "model_b"] and item["type"] == "not_a_listed_model"
        assert "GET /api/models" in item["msg"] and "--models-dir" in item["msg"] and "tiny-b" in item["msg"]
    assert served.get("/healthz").status_code == 200


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def test_no_answer_holds_an_absolute_path_of_the_server(served, places, checkpoint_dir):
    answers = [served.get("/api/models").json(), served.get("/api/atlas").json()]
    ids = [a["id"] for a in answers[1]["atlases"]]
    assert len(ids) == 2
    answers.append(served.get(f"/api/atlas?atlas={ids[0]}&compare={ids[1]}").json())
    answers.append(served.get(f"/api/atlas/heads/0/0?atlas={ids[0]}").json())
    answers.append(served.get(f"/api/atlas/heads/0/0/qk?atlas={ids[0]}").json())
    assert answers[0]["models"][0]["path"] == checkpoint_dir.name  # the checkpoint: by its folder's name
    assert answers[1]["atlases"][0]["corpus"]["files"][0]["path"] == "corpus.txt"
    server_paths = {str(places), str(checkpoint_dir), str(checkpoint_dir.parent), "/tmp", "/home", "/root"}
    for text in (s for answer in answers for s in strings(answer)):
        assert not text.startswith("/"), text
        assert not any(p in text for p in server_paths), text


def test_serve_refuses_a_models_dir_that_is_not_a_folder(tmp_path, checkpoint_dir, capsys):
    from attnscope.app.cli.main import main

    args = ["serve", "--port", "0", "--device", "cpu", "--checkpoint", str(checkpoint_dir)]
    assert main([*args, "--models-dir", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--models-dir" in err and "not a folder" in err
