"""Knocked-out edges are a part of the subject (contract v6: the what-ifs): ``/api/attention`` and every route
that takes the what-ifs take ``edges`` and answer the patterns and predictions after them, equal to
transformers' eager attention with the same cells of the mask at -inf; ``/api/knockout`` reads its edges
from the same part."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from tests.kit.interventions import TEXT, knocked_out, oracle_logits  # noqa: E402
from tests.kit.interventions_app import SERVED, family_dirs, knock_oracles, refused  # noqa: E402, F401

# (layer, head or None, q0, q1, k0, k1): a cell of one head, and a block of every head of a layer
EDGES = [{"layer": 1, "head": 1, "query": 20, "key": [17, 19]}, {"layer": 0, "query": [10, 14], "key": 9}]
CELLS = [(1, 1, 20, 21, 17, 19), (0, None, 10, 14, 9, 10)]


def knocked(cells, layer: int, head: int, n: int) -> np.ndarray:
    """(T, T) bool: the cells of ``layer``, ``head`` the edges knock out."""
    out = np.zeros((n, n), dtype=bool)
    for lay, h, q0, q1, k0, k1 in cells:
        if lay == layer and h in (None, head):
            out[q0:q1, k0:k1] = True
    return out


@pytest.mark.parametrize("name", SERVED)
def test_the_patterns_after_the_edges_equal_eager_with_the_cells_masked(name, clients, knock_oracles):  # noqa: F811
    client, model = clients[name], knock_oracles[name]
    body = {"text": TEXT, "edges": EDGES, "include": ["pattern"], "top_k": 3}
    r = client.post("/api/attention", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    ids = data["token_ids"]
    with knocked_out(CELLS), torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    before = client.post("/api/attention", json={**body, "edges": []}).json()
    n, changed = len(ids), 0
    for lv, lb in zip(data["layers"], before["layers"], strict=True):
        for hv, hb in zip(lv["heads"], lb["heads"], strict=True):
            pattern = np.array(hv["pattern"], dtype=float)  # the served row, after the knockout
            cut = knocked(CELLS, lv["layer"], hv["head"], n)
            assert (pattern[cut] == 0).all()  # a knocked-out edge's weight is 0
            np.testing.assert_allclose(pattern.sum(-1), 1.0, atol=1e-4)  # and each row renormalises
            expected = out.attentions[lv["layer"]][0, hv["head"]].double().numpy()
            assert np.abs(pattern - expected).max() <= 2e-3
            changed += int(np.abs(pattern - np.array(hb["pattern"], dtype=float)).max() > 1e-3)
    assert changed >= 2  # the knocked-out heads differ from the model as trained
    top = out.logits[0].argmax(-1).tolist()  # the predictions after the edges follow them
    assert [p[0]["id"] for p in data["predictions"]] == top


@pytest.mark.parametrize("url", ["/api/attention", "/api/rollout", "/api/selection", "/api/neuron"])
def test_a_route_of_the_what_ifs_checks_the_edges_as_knockout_does(url, clients):  # noqa: F811
    client = clients["llama"]
    n = len(client.app.state.attnscope.service.loaded.tokenizer.encode_ids(TEXT))
    extra = {"/api/selection": {"layer": 0, "head": 0}, "/api/neuron": {"layer": 0, "head": 0}}.get(url, {})
    for edge, loc in (
        ({"layer": 3, "query": 3, "key": 1}, ["edges", 0, "layer"]),
        ({"layer": 0, "head": 6, "query": 3, "key": 1}, ["edges", 0, "head"]),
        ({"layer": 0, "query": n, "key": 1}, ["edges", 0, "query"]),
    ):
        refused(client, url, {"text": TEXT, "edges": [edge], **extra}, loc)
    error = refused(client, url, {"text": TEXT, "edges": [{"layer": 1, "query": 3, "key": [0, 4]}], **extra}, ["edges"])
    assert error["type"] == "no_key_left" and error["ctx"] == {"layer": 1, "head": 0, "query": 3}


def test_knockout_reads_its_edges_from_the_subject(clients, knock_oracles):  # noqa: F811
    """/api/knockout keeps its answer: log p before and after, the predictions after equal to /api/attention's
    with the same edges."""
    client = clients["gpt2-export"]
    got = client.post("/api/knockout", json={"text": TEXT, "edges": EDGES, "position": 20})
    assert got.status_code == 200, got.text
    ids = client.app.state.attnscope.service.loaded.tokenizer.encode_ids(TEXT)
    with knocked_out(CELLS):
        after = oracle_logits(knock_oracles["gpt2-export"], ids)
    token = got.json()["token_id"]
    assert abs(got.json()["logprob_after"] - float(torch.log_softmax(after[20].double(), -1)[token])) <= 1e-4
    att = client.post("/api/attention", json={"text": TEXT, "edges": EDGES, "layers": [], "top_k": 5}).json()
    assert [p["id"] for p in att["predictions"][20]] == [p["id"] for p in got.json()["predictions"][20]]
