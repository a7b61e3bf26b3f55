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


def test_runs_that_agree_on_the_top_guess_get_the_corrupt_runs_next_guess_as_the_foil(client):
    """Issue 42, item 3: with ``foil_id`` left out, the foil is the corrupt run's best guess other than the
    token, so texts whose runs agree on the top guess (common) are patched, not refused; the answer names
    the foil and both runs' top guesses, as /api/attention predicts them."""
    clean = "the cat sat on the mat and then"
    agreed = 0
    for first in "abcdefghijklmnopqrstuvwxyz":
        corrupt = first + clean[1:]
        tops = []
        for text in (clean, corrupt):
            r = client.post("/api/attention", json={"text": text, "layers": [0], "heads": [], "include": []})
            tops.append([p["id"] for p in r.json()["predictions"][-1]])
        r = client.post("/api/patching", json={"clean": clean, "corrupt": corrupt})
        if r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "corrupt"]:
            continue  # the same difference in both runs: nothing to restore
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["token_id"] == tops[0][0] and data["foil_id"] != data["token_id"]
        assert data["foil_id"] == next(i for i in tops[1] if i != data["token_id"])
        assert data["foil"] == next(g["token"] for g in data["corrupt_top"] if g["token_id"] == data["foil_id"])
        assert [g["token_id"] for g in data["clean_top"]] == tops[0]
        assert [g["token_id"] for g in data["corrupt_top"]] == tops[1]
        agreed += tops[0][0] == tops[1][0]
    assert agreed > 0  # some of the pairs agree on the top guess: the case that was refused
