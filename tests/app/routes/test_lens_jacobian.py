"""POST /api/lens through a Jacobian lens (``serve --jlens``), against transformers' hidden states and
its heads' writes (a pre-hook on the output projection), each carried by the file's J."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from attnscope.app.main import create_app  # noqa: E402
from attnscope.app.settings import Settings  # noqa: E402
from attnscope.model.jlens.lensfile import LensFileError, load_lens, save_lens  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from tests.kit.hooks import head_dim, out_projection  # noqa: E402
from tests.kit.interventions import TEXT, decoder_layers, final_norm, unembed  # noqa: E402
from tests.kit.interventions_app import SERVED, family_dirs, oracles, refused  # noqa: E402, F401

K = 3


def random_lens(path, d: int, layers: list[int], seed: int):
    g = torch.Generator().manual_seed(seed)
    J = {layer: torch.eye(d) + 0.5 * torch.randn(d, d, generator=g) for layer in layers}
    return save_lens(path, J, 7, {"model": "test"})


@pytest.fixture(scope="module")
def lenses(family_dirs, oracles, tmp_path_factory):  # noqa: F811
    """A lens file per model: random J for blocks 0 and 1 (not the others: a partial lens)."""
    root = tmp_path_factory.mktemp("lenses")
    return {name: random_lens(root / f"{name}.pt", oracles[name].config.hidden_size, [0, 1], i)
            for i, name in enumerate(SERVED)}


@pytest.fixture(scope="module")
def clients(family_dirs, lenses):  # noqa: F811
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(TestClient(create_app(Settings(
                checkpoint=family_dirs[name], device="cpu", torch_threads=1, jlens=str(lenses[name])))))
            for name in SERVED
        }


def top_ids(model, x: torch.Tensor) -> list[list[int]]:
    """The top K of W_U · norm(x) for rows x (T, C)."""
    with torch.no_grad():
        return torch.topk(unembed(model, final_norm(model)(x.float())), K, dim=-1).indices.tolist()


@pytest.mark.parametrize("name", SERVED)
def test_the_jacobian_lens_reads_each_carried_block_output(name, clients, oracles, lenses):  # noqa: F811
    client, model = clients[name], oracles[name]
    lens = load_lens(lenses[name])
    info = client.get("/api/model").json()
    assert info["jlens"] == {"source_layers": [0, 1], "n_prompts": 7}
    r = client.post("/api/lens", json={"text": TEXT, "top_k": K, "lens": "jacobian"})
    assert r.status_code == 200, r.text
    data = r.json()
    last = info["n_layer"] - 1
    assert data["lens"] == "jacobian" and [e["after"] for e in data["residuals"]] == [0, 1, last]
    ids = client.app.state.attnscope.service.loaded.tokenizer.encode_ids(TEXT)
    with torch.no_grad():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states  # embeddings, then each block
    for entry in data["residuals"][:2]:
        layer = entry["after"]
        carried = hidden[layer + 1][0] @ lens.J[layer].float().T
        assert [[p["id"] for p in row] for row in entry["top"]] == top_ids(model, carried)
        logit = client.post("/api/lens", json={"text": TEXT, "top_k": K}).json()["residuals"][layer + 1]
        assert logit["top"] != entry["top"]  # J moved the reading
    with torch.no_grad():
        own = torch.topk(model(torch.tensor([ids])).logits[0], K, dim=-1).indices.tolist()
    assert [[p["id"] for p in row] for row in data["residuals"][-1]["top"]] == own


def head_writes(model, ids: list[int]) -> list[torch.Tensor]:
    """Per layer ``(nh, T, C)``: each head's slice of the output projection's input times its slice of the weight."""
    hs, kept = head_dim(model), {}
    handles = [
        out_projection(model, layer).register_forward_pre_hook(lambda m, a, layer=layer: kept.__setitem__(layer, a[0]))
        for layer in range(len(decoder_layers(model)))
    ]
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in handles:
        h.remove()
    out = []
    for layer, z in sorted(kept.items()):
        proj = out_projection(model, layer)
        w = proj.weight if model.config.model_type == "gpt2" else proj.weight.T  # (in, out)
        nh = z.shape[-1] // hs
        out.append(torch.stack([z[0, :, h * hs:(h + 1) * hs] @ w[h * hs:(h + 1) * hs] for h in range(nh)]))
    return out


@pytest.mark.parametrize("name", SERVED)
@pytest.mark.parametrize("kind", ["jacobian", "logit"])
def test_each_heads_write_is_read_through_its_layers_j(name, kind, clients, oracles, lenses):  # noqa: F811
    client, model = clients[name], oracles[name]
    lens = load_lens(lenses[name])
    r = client.post("/api/lens", json={"text": TEXT, "top_k": K, "lens": kind, "heads": True})
    assert r.status_code == 200, r.text
    heads = r.json()["heads"]
    ids = client.app.state.attnscope.service.loaded.tokenizer.encode_ids(TEXT)
    writes = head_writes(model, ids)
    last = len(writes) - 1
    with torch.no_grad():
        own = model(torch.tensor([ids])).logits[0].argmax(-1)  # the model's own guess at each token
    assert len(heads) == len(writes)
    for layer, per_head in enumerate(heads):
        if kind == "jacobian" and layer not in lens.J and layer != last:
            assert per_head is None  # no J fitted for this block
            continue
        for h, entry in enumerate(per_head):
            write = writes[layer][h]
            if kind == "jacobian" and layer in lens.J:
                write = write @ lens.J[layer].float().T
            assert [[p["id"] for p in row] for row in entry["top"]] == top_ids(model, write), (layer, h)
            with torch.no_grad():
                probs = torch.softmax(unembed(model, final_norm(model)(write.float())).double(), -1)
            expected = probs[torch.arange(len(ids)), own].numpy()
            assert np.allclose(entry["final_prob"], expected, rtol=1e-4, atol=1e-7), (layer, h)


def test_the_jacobian_lens_needs_one_loaded(family_dirs):  # noqa: F811
    with TestClient(create_app(Settings(checkpoint=family_dirs["llama"], device="cpu", torch_threads=1))) as client:
        assert client.get("/api/model").json()["jlens"] is None
        error = refused(client, "/api/lens", {"text": TEXT, "lens": "jacobian"}, ["lens"])
        assert "--jlens" in error["msg"]
        refused(client, "/api/lens", {"text": TEXT, "lens": "tuned"}, ["lens"])


@pytest.mark.parametrize("problem", ["missing", "wide"])
def test_a_lens_that_does_not_fit_stops_the_start_in_one_line(problem, family_dirs, oracles, tmp_path):  # noqa: F811
    d = oracles["llama"].config.hidden_size
    path = tmp_path / "lens.pt"
    if problem == "wide":
        random_lens(path, d + 4, [0], 0)
    app = create_app(Settings(checkpoint=family_dirs["llama"], device="cpu", torch_threads=1, jlens=str(path)))
    with pytest.raises(LensFileError), TestClient(app):
        pass
    line = app.state.attnscope.startup_error
    assert line.startswith(f"attnscope: cannot start: {path}: ") and "\n" not in line
    assert ("no such lens file" if problem == "missing" else f"d_model {d + 4}") in line


def test_heads_beyond_the_answer_limit_is_a_422_naming_heads(family_dirs, oracles):  # noqa: F811
    cfg = oracles["llama"].config
    ids_per_token = cfg.num_hidden_layers * cfg.num_attention_heads * cfg.hidden_size
    settings = Settings(checkpoint=family_dirs["llama"], device="cpu", torch_threads=1, max_matrix_cells=1024 * 16)
    with TestClient(create_app(settings)) as client:
        most = 1024 * 16 // ids_per_token
        T = len(client.app.state.attnscope.service.loaded.tokenizer.encode_ids(TEXT))
        assert T > most
        error = refused(client, "/api/lens", {"text": TEXT, "heads": True}, ["heads"])
        assert f"at most {most} tokens" in error["msg"] and "16,384" in error["msg"]
        assert client.post("/api/lens", json={"text": TEXT}).status_code == 200  # the lens alone is fine
