"""``POST /api/compare-models`` over a Hub cache the test writes: a tiny Llama, a copy of it with
layer 1's query and key weights changed, a Llama of another shape and a model with another
tokenizer. Every number is checked against transformers' eager ``output_attentions`` of both
models (the oracle), never against attnscope's own."""

from __future__ import annotations

import time

import numpy as np
import pytest
from attnscope.app.main import create_app
from attnscope.app.settings import Settings
from fastapi.testclient import TestClient

transformers = pytest.importorskip("transformers")

from tests.kit.family import build  # noqa: E402
from tests.kit.hub import change_layer, copy_with, put_in_cache  # noqa: E402

TEXT = "The cat sat on the mat. The dog sat on the log."
CHANGED = 1  # the layer whose q/k weights the tuned copy changes


def _change_layer(model):
    change_layer(model, CHANGED)


def _other_tokenizer(src, out):
    """The same model with a tokenizer that gives two of the text's tokens each other's ids."""
    import json

    from tokenizers import Tokenizer

    out = copy_with(src, out)
    tk = Tokenizer.from_file(str(src / "tokenizer.json"))
    first, second = tk.encode(TEXT).tokens[2:4]
    spec = json.loads((src / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return out


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    base = build("llama", src / "base")
    root = tmp_path_factory.mktemp("hf") / "hub"
    dirs = {
        "org/base": base,
        "org/tuned": copy_with(base, src / "tuned", _change_layer),
        "org/shallow": copy_with(base, src / "shallow", num_hidden_layers=2),
        "org/other-tokenizer": _other_tokenizer(base, src / "other-tokenizer"),
    }
    snapshots = {name: put_in_cache(root, name, d) for name, d in dirs.items()}
    return root, snapshots


@pytest.fixture(scope="module")
def client(hub, tmp_path_factory):
    root, snapshots = hub
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(root))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("OLLAMA_MODELS", str(home / "no-ollama"))
        mp.setenv("HOME", str(home))
        settings = Settings(checkpoint=snapshots["org/base"], device="cpu", torch_threads=1)
        with TestClient(create_app(settings)) as c:
            yield c


def compare(client, **body):
    """POST until model_b is loaded (202 meanwhile); the last response."""
    body = {"text": TEXT, "layer": CHANGED, "head": 0, **body}
    deadline = time.monotonic() + 120
    while True:
        r = client.post("/api/compare-models", json=body)
        if r.status_code != 202:
            return r
        assert r.json() == {"model_b": body["model_b"], "status": "loading"}
        assert time.monotonic() < deadline, "model_b never loaded"
        time.sleep(0.1)


def eager_patterns(folder, ids):
    """(L, nh, T, T) float64: transformers' eager output_attentions."""
    import torch

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    return np.stack([a[0].double().numpy() for a in out.attentions])


def oracle(pa, pb):
    """Per (layer, head): JS divergence in bits (mean over rows), max |difference|, argmax agreement."""
    m = (pa + pb) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_a = np.where(pa > 0, pa * np.log2(pa / m), 0.0).sum(-1)
        kl_b = np.where(pb > 0, pb * np.log2(pb / m), 0.0).sum(-1)
    js = ((kl_a + kl_b) / 2).mean(-1)
    return js, np.abs(pa - pb).max(axis=(-2, -1)), (pa.argmax(-1) == pb.argmax(-1)).mean(-1)


def test_each_number_equals_eager_attention_of_both(client, hub):
    _, snapshots = hub
    r = compare(client, model_b="org/tuned")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model_a"] == "org/base" and out["model_b"] == "org/tuned"
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(snapshots["org/base"] / "tokenizer.json")).encode(TEXT).ids
    assert len(out["tokens"]) == len(ids)
    pa, pb = eager_patterns(snapshots["org/base"], ids), eager_patterns(snapshots["org/tuned"], ids)
    js, max_abs, agree = oracle(pa, pb)
    np.testing.assert_allclose(np.array(out["divergence"]), js, atol=2e-6)
    np.testing.assert_allclose(np.array(out["max_abs"]), max_abs, atol=2e-6)
    np.testing.assert_allclose(np.array(out["argmax_agreement"]), agree, atol=1e-12)
    np.testing.assert_allclose(np.array(out["a"]), pa[CHANGED, 0], atol=2e-6)
    np.testing.assert_allclose(np.array(out["b"]), pb[CHANGED, 0], atol=2e-6)
    # the layers before the change read exactly 0, and the changed one does not
    for layer in range(CHANGED):
        assert out["divergence"][layer] == [0.0] * pa.shape[1] and out["max_abs"][layer] == [0.0] * pa.shape[1]
        assert out["argmax_agreement"][layer] == [1.0] * pa.shape[1]
    assert min(out["divergence"][CHANGED]) > 1e-4


def test_the_difference_and_mask_equal_eager_attention_of_both(client, hub):
    """The page draws the chosen head's b − a from the answer (never subtracting itself), with the mask."""
    _, snapshots = hub
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(snapshots["org/base"] / "tokenizer.json")).encode(TEXT).ids
    pa, pb = eager_patterns(snapshots["org/base"], ids), eager_patterns(snapshots["org/tuned"], ids)
    for layer, head in ((CHANGED, 0), (CHANGED, 5), (0, 3)):
        r = compare(client, model_b="org/tuned", layer=layer, head=head)
        assert r.status_code == 200, r.text
        out = r.json()
        difference, mask = np.array(out["difference"]), np.array(out["mask"])
        np.testing.assert_allclose(difference, pb[layer, head] - pa[layer, head], atol=4e-6)
        assert np.float32(np.abs(difference).max()) == np.float32(out["max_abs"][layer][head])
        # masked: both models' eager weights are exactly 0 there, and the difference too; else both weigh it
        assert set(np.unique(mask)) == {0, 1}
        assert (pa[:, :, mask == 0] == 0).all() and (pb[:, :, mask == 0] == 0).all()
        assert (pa[:, :, mask == 1] > 0).all() and (difference[mask == 0] == 0).all()
    assert out["difference"] == [[0.0] * len(ids)] * len(ids)  # layer 0 is the same in both


def test_the_second_model_stays_loaded(client):
    assert compare(client, model_b="org/tuned").status_code == 200
    r = client.post("/api/compare-models", json={"text": TEXT, "model_b": "org/tuned", "layer": 0, "head": 2})
    assert r.status_code == 200, r.text
    assert r.json()["divergence"][0] == [0.0] * 6


def test_the_served_model_against_itself_is_zero_everywhere(client):
    out = compare(client, model_b="org/base").json()
    assert {v for row in out["divergence"] for v in row} == {0.0}
    assert {v for row in out["argmax_agreement"] for v in row} == {1.0}
    assert out["a"] == out["b"]


@pytest.mark.parametrize(
    ("name", "says"),
    [("org/shallow", "it has 2 layers and the served model 3"), ("org/other-tokenizer", "other token ids")],
)
def test_another_shape_or_tokenizer_is_a_422_naming_model_b(client, name, says):
    r = compare(client, model_b=name)
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["loc"] == ["body", "model_b"] and says in item["msg"], item


def test_a_name_not_on_this_machine_is_a_422_naming_model_b(client):
    r = client.post("/api/compare-models", json={"text": TEXT, "model_b": "org/nowhere"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "model_b"]


def test_a_head_out_of_range_is_a_422_naming_head(client):
    r = compare(client, model_b="org/base", head=6)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "head"]


def test_a_second_model_that_does_not_fit_is_a_507_naming_both_sizes(client, monkeypatch):
    monkeypatch.setattr("attnscope.app.compute.switch.available_bytes", lambda device: 1024)
    r = client.post("/api/compare-models", json={"text": TEXT, "model_b": "org/shallow"})
    assert r.status_code == 507, r.text
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "model_b"] and item["ctx"]["free_bytes"] == 1024 and item["ctx"]["need_bytes"] > 0
