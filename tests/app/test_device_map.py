"""A tiny Llama served with its layers on the CPU and on disk (``--device-map`` JSON,
``--offload-folder``: accelerate places them, on a machine with no GPU too) answers every route
exactly as the same model on one device."""

from __future__ import annotations

import json

import pytest
from attnscope.app.main import create_app
from attnscope.app.settings import Settings
from fastapi.testclient import TestClient

pytest.importorskip("accelerate")
pytest.importorskip("transformers")

from tests.kit.family import build  # noqa: E402

DEVICE_MAP = {
    "model.embed_tokens": "cpu",
    "model.rotary_emb": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.layers.2": "disk",
    "model.norm": "cpu",
    "lm_head": "disk",
}
LAYERS = {"0": "cpu", "1": "disk", "2": "disk"}
SKIPPED = {"/api/model", "/api/compare-models"}  # a switch; a second model (tested in test_app_compare.py)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build("llama", tmp_path_factory.mktemp("mapped") / "llama")


@pytest.fixture(scope="module")
def pair(folder):
    """The same model: on one device, and spread over the CPU and disk."""
    root = folder.parent
    one = Settings(checkpoint=folder, device="cpu", torch_threads=1)
    spread = Settings(
        checkpoint=folder,
        device="cpu",
        torch_threads=1,
        device_map=json.dumps(DEVICE_MAP),
        offload_folder=root / "offload",
    )
    with TestClient(create_app(one)) as a, TestClient(create_app(spread)) as b:
        yield a, b


def _without_timing(value):
    """The answer without what differs by construction: timings, and where the layers sit."""
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k != "devices" and not k.endswith("_ms")}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def answer(response):
    """The JSON answer, or each line of a streamed one (NDJSON), without timings and devices."""
    lines = response.text.splitlines()
    if len(lines) > 1:
        return [_without_timing(json.loads(line)) for line in lines]
    return _without_timing(response.json())


def request_examples(app) -> list[tuple[str, dict]]:
    """Every POST route's request examples from the API document, (path, body) each."""
    doc = app.openapi()
    out = []
    for path, item in doc["paths"].items():
        op = item.get("post")
        if op is None or path in SKIPPED:
            continue
        ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        for example in doc["components"]["schemas"][ref].get("examples", []):
            out.append((path, example))
    return out


def test_the_model_says_where_each_layer_sits(pair):
    one, spread = pair
    assert spread.get("/api/model").json()["devices"] == LAYERS
    assert one.get("/api/model").json()["devices"] == {"0": "cpu", "1": "cpu", "2": "cpu"}
    a, b = one.get("/api/model").json(), spread.get("/api/model").json()
    assert {k: v for k, v in a.items() if k != "devices"} == {k: v for k, v in b.items() if k != "devices"}


def test_every_route_answers_as_on_one_device(pair):
    one, spread = pair
    examples = request_examples(one.app)
    paths = {path for path, _ in examples}
    for must in ("/api/attention", "/api/head-effects", "/api/generate", "/api/lens", "/api/patching"):
        assert must in paths
    answered = 0
    for path, body in examples:
        a, b = one.post(path, json=body), spread.post(path, json=body)
        assert a.status_code == b.status_code, (path, body, a.text, b.text)
        assert answer(a) == answer(b), (path, body)
        answered += a.status_code == 200
    assert answered >= len(paths)  # at least one example of each route answered
    assert one.get("/api/heads").json() == spread.get("/api/heads").json()


def test_ablation_and_head_effects_as_on_one_device(pair):
    one, spread = pair
    text = "The cat sat on the mat. The dog sat on the log."
    for path, body in [
        ("/api/attention", {"text": text, "ablate": [{"layer": 1, "head": 2}], "layers": [2]}),
        ("/api/head-effects", {"text": text, "ablation": "mean"}),
        ("/api/generate", {"text": text, "max_new_tokens": 4, "ablate": [{"layer": 0, "head": 1}]}),
    ]:
        a, b = one.post(path, json=body), spread.post(path, json=body)
        assert a.status_code == 200, a.text
        assert answer(a) == answer(b), path


def test_inspect_with_a_device_map_prints_what_one_device_does(folder, tmp_path, capsys):
    from attnscope.app.cli.main import main

    text = "The cat sat on the mat."
    assert main(["inspect", text, "--checkpoint", str(folder), "--device", "cpu", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    mapped = ["--device-map", json.dumps(DEVICE_MAP), "--offload-folder", str(tmp_path / "off")]
    assert main(["inspect", text, "--checkpoint", str(folder), "--device", "cpu", *mapped, "--json"]) == 0
    spread = json.loads(capsys.readouterr().out)
    assert spread["model"]["devices"] == LAYERS
    assert _without_timing(one) == _without_timing(spread)


@pytest.mark.parametrize(
    ("option", "value"), [("--device-map", "nonsense"), ("--device-map", '{"model": "gpu7"}'), ("--max-memory", "0=")]
)
def test_a_bad_placement_is_one_line_naming_the_option_and_exit_2(option, value, capsys):
    from attnscope.app.cli.main import main

    assert main(["inspect", "a text", option, value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{option} {value}" in err, err


def test_device_map_on_our_own_checkpoint_is_refused_in_one_line(checkpoint_dir, capsys):
    from attnscope.app.cli.main import main

    assert main(["inspect", "a text", "--checkpoint", str(checkpoint_dir), "--device-map", "auto"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device-map" in err and "--device" in err, err


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_layers_on_a_gpu_and_the_cpu_answer_as_on_one_device(folder):
    """Layers 0-1 on the GPU, layer 2 and the head on the CPU: the capture brings each device's parts
    home in its own packed copy (one torch.cat over two devices would fail)."""
    on_gpu = {**DEVICE_MAP, "model.embed_tokens": 0, "model.rotary_emb": 0, "model.layers.0": 0, "model.layers.1": 0}
    on_gpu |= {"model.layers.2": "cpu", "lm_head": "cpu"}
    one = Settings(checkpoint=folder, device="cpu", torch_threads=1)
    split = Settings(checkpoint=folder, device="cuda", torch_threads=1, device_map=json.dumps(on_gpu))
    body = {"text": "The cat sat on the mat. The cat", "thumbnail": 8, "focus": {"layer": 2, "head": 1}}
    with TestClient(create_app(one)) as a, TestClient(create_app(split)) as b:
        assert b.get("/api/model").json()["devices"] == {"0": "cuda:0", "1": "cuda:0", "2": "cpu"}
        ra, rb = a.post("/api/attention", json=body).json(), b.post("/api/attention", json=body).json()
    for la, lb in zip(ra["layers"], rb["layers"]):
        for ha, hb in zip(la["heads"], lb["heads"]):
            assert max(abs(x - y) for xs, ys in zip(ha["pattern"], hb["pattern"]) for x, y in zip(xs, ys)) <= 1e-4
