"""POST /api/knockout over JSON, against eager attention with the edges' cells of the mask at -inf, and its 422s."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from tests.kit.interventions import TEXT, knocked_out, oracle_logits  # noqa: E402
from tests.kit.interventions_app import SERVED, family_dirs, knock_oracles, refused  # noqa: E402, F401


@pytest.mark.parametrize("name", SERVED)
def test_served_knockout_equals_eager_with_the_cells_masked(name, clients, knock_oracles):  # noqa: F811
    client, model = clients[name], knock_oracles[name]
    edges = [{"layer": 1, "head": 1, "query": 20, "key": [17, 19]}, {"layer": 0, "query": [10, 14], "key": 9}]
    r = client.post("/api/knockout", json={"text": TEXT, "edges": edges, "position": 20})
    assert r.status_code == 200, r.text
    data = r.json()
    ids = client.app.state.attnscope.service.loaded.tokenizer.encode_ids(TEXT)
    clean = oracle_logits(model, ids)
    with knocked_out([(1, 1, 20, 21, 17, 19), (0, None, 10, 14, 9, 10)]):
        after = oracle_logits(model, ids)
    token = int(clean[20].argmax())  # the default: the top guess before
    assert (data["position"], data["token_id"]) == (20, token)
    assert abs(data["logprob_before"] - float(torch.log_softmax(clean[20].double(), -1)[token])) <= 1e-4
    assert abs(data["logprob_after"] - float(torch.log_softmax(after[20].double(), -1)[token])) <= 1e-4
    assert abs(data["logprob_after"] - data["logprob_before"]) > 1e-4
    top = torch.topk(torch.softmax(after.double(), -1), 5)
    assert [[p["id"] for p in row] for row in data["predictions"]] == top.indices.tolist()
    probs = np.array([[p["prob"] for p in row] for row in data["predictions"]])
    assert np.abs(probs - top.values.numpy()).max() <= 1e-5


def test_knockout_refuses_what_it_cannot_do(clients):  # noqa: F811
    client = clients["llama"]
    n = len(client.app.state.attnscope.service.loaded.tokenizer.encode_ids(TEXT))
    body = {"text": TEXT, "edges": [{"layer": 0, "query": 3, "key": 1}]}
    refused(client, "/api/knockout", {**body, "position": n}, ["position"])
    refused(client, "/api/knockout", {**body, "token_id": 10**6}, ["token_id"])
    for edge, loc in (
        ({"layer": 3, "query": 3, "key": 1}, ["edges", 0, "layer"]),
        ({"layer": 0, "head": 6, "query": 3, "key": 1}, ["edges", 0, "head"]),
        ({"layer": 0, "query": n, "key": 1}, ["edges", 0, "query"]),
        ({"layer": 0, "query": 3, "key": [2, 2]}, ["edges", 0, "key"]),
        ({"layer": 0, "query": 3, "key": [0, n + 1]}, ["edges", 0, "key"]),
    ):
        refused(client, "/api/knockout", {"text": TEXT, "edges": [edge]}, loc)
    refused(client, "/api/knockout", {"text": TEXT, "edges": []}, ["edges"])
    error = refused(
        client, "/api/knockout", {"text": TEXT, "edges": [{"layer": 1, "query": 3, "key": [0, 4]}]}, ["edges"]
    )
    assert error["type"] == "no_key_left" and error["ctx"] == {"layer": 1, "head": 0, "query": 3}
    assert client.get("/healthz").status_code == 200  # and the server keeps serving
