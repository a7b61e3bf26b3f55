"""POST /api/patching over JSON, against hooked transformers runs (the clean slice written into the corrupt run),
and its 422s."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tests.kit.hooks import head_dim  # noqa: E402
from tests.kit.interventions import head_inputs, head_patched, layer_outputs, oracle_logits, residual_patched  # noqa: E402
from tests.kit.interventions_app import SERVED, family_dirs, oracles, refused  # noqa: E402, F401

CLEAN = "The cat sat on the mat. Then the cat saw the dog"
CORRUPT = "The dog sat on the mat. Then the dog saw the cat"


def diff(logits, token, foil) -> float:
    return float(logits[-1, token].double() - logits[-1, foil].double())


@pytest.mark.parametrize("name", SERVED)
@pytest.mark.parametrize("what", ["heads", "residual"])
def test_served_patching_equals_the_hooked_corrupt_run(name, what, clients, oracles):  # noqa: F811
    client, model = clients[name], oracles[name]
    tokenizer = client.app.state.attnscope.service.loaded.tokenizer
    clean, corrupt = tokenizer.encode_ids(CLEAN), tokenizer.encode_ids(CORRUPT)
    assert len(clean) == len(corrupt)
    r = client.post("/api/patching", json={"clean": CLEAN, "corrupt": CORRUPT, "what": what})
    if r.status_code == 422:  # both runs' top guess alike: the foil must be given
        assert r.json()["detail"][0]["loc"] == ["body", "foil_id"]
        foil = int(torch.topk(oracle_logits(model, corrupt)[-1], 2).indices[1])
        r = client.post("/api/patching", json={"clean": CLEAN, "corrupt": CORRUPT, "what": what, "foil_id": foil})
    assert r.status_code == 200, r.text
    data = r.json()
    token, foil = data["token_id"], data["foil_id"]
    assert token == int(oracle_logits(model, clean)[-1].argmax())
    clean_diff = diff(oracle_logits(model, clean), token, foil)
    corrupt_diff = diff(oracle_logits(model, corrupt), token, foil)
    assert abs(data["clean_diff"] - clean_diff) <= 1e-4 and abs(data["corrupt_diff"] - corrupt_diff) <= 1e-4
    share = lambda logits: (diff(logits, token, foil) - corrupt_diff) / (clean_diff - corrupt_diff)  # noqa: E731
    L = len(data[what])
    if what == "heads":
        hs, inputs = head_dim(model), head_inputs(model, clean)
        for layer, h in [(0, 1), (L - 1, 2)]:
            with head_patched(model, layer, h, inputs[layer][:, h * hs : (h + 1) * hs]):
                assert abs(data["heads"][layer][h] - share(oracle_logits(model, corrupt))) <= 1e-3
    else:
        outputs = layer_outputs(model, clean)
        for layer, p in [(0, 1), (L - 1, len(clean) - 1), (1, 7)]:
            with residual_patched(model, layer, p, outputs[layer][p]):
                assert abs(data["residual"][layer][p] - share(oracle_logits(model, corrupt))) <= 1e-3


def test_patching_refuses_what_it_cannot_do(clients):  # noqa: F811
    client = clients["llama"]
    body = {"clean": CLEAN, "corrupt": CORRUPT, "token_id": 7, "foil_id": 8}
    n = len(client.app.state.attnscope.service.loaded.tokenizer.encode_ids(CLEAN))
    error = refused(client, "/api/patching", {**body, "corrupt": CORRUPT + " and the bird"}, ["corrupt"])
    assert error["ctx"]["clean"] == n
    refused(client, "/api/patching", {**body, "foil_id": 7}, ["foil_id"])
    refused(client, "/api/patching", {**body, "position": n}, ["position"])
    refused(client, "/api/patching", {**body, "token_id": 10**6}, ["token_id"])
    refused(client, "/api/patching", {**body, "what": "mlps"}, ["what"])
    refused(client, "/api/patching", {**body, "corrupt": " "}, ["corrupt"])
    refused(client, "/api/patching", {**body, "corrupt": CLEAN}, ["corrupt"])  # nothing to restore
