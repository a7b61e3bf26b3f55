"""``ablate`` in POST /api/attention and POST /api/head-effects, over JSON, with transformers
as the oracle: a forward pre-hook zeroing the head's slice of the output projection's input.
Two served models: the GPT-2 export of a random GPT of ours (our code runs it) and a Llama-style
grouped-query model (the transformers backend)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.kit.app import attention, served

pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM  # noqa: E402

from tests.kit.hooks import CASES, TEXT, hooked, model_dirs  # noqa: E402, F401

TOL = 2e-3


@pytest.fixture(scope="module")
def clients(model_dirs):  # noqa: F811
    with served(model_dirs) as clients:
        yield clients


@pytest.fixture(scope="module")
def oracles(model_dirs):  # noqa: F811
    return {
        name: AutoModelForCausalLM.from_pretrained(p, attn_implementation="eager").eval()
        for name, p in model_dirs.items()
    }


def oracle(model, ids, heads=()):
    with torch.no_grad(), hooked(model, heads):
        out = model(torch.tensor([ids]), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).numpy(), torch.softmax(out.logits[0].double(), -1).numpy()


def refs(heads):
    return [{"layer": layer, "head": h} for layer, h in heads]


@pytest.mark.parametrize("name", list(CASES))
def test_served_ablation_equals_the_hooked_model(name, clients, oracles):
    heads = CASES[name]
    data = attention(clients[name], text=TEXT, include=["pattern"], top_k=5, ablate=refs(heads))
    assert data["ablate"] == refs(heads)
    pattern, probs = oracle(oracles[name], data["token_ids"], heads)
    served = np.array([[h["pattern"] for h in layer["heads"]] for layer in data["layers"]])
    assert np.abs(served - pattern).max() <= TOL
    for t, preds in enumerate(data["predictions"]):
        assert preds[0]["id"] == int(probs[t].argmax())
        for p in preds:
            assert abs(p["prob"] - probs[t, p["id"]]) <= TOL
    # the switch did something the page can show: later layers and predictions moved
    clean = attention(clients[name], text=TEXT, include=["pattern"], top_k=5)
    assert clean["ablate"] == []
    before = np.array([[h["pattern"] for h in layer["heads"]] for layer in clean["layers"]])
    last = max(layer for layer, _ in heads)
    assert np.abs(before[last + 1 :] - served[last + 1 :]).max() > 1e-2


def test_ablation_works_with_the_other_what_ifs(clients, oracles):
    body = dict(text=TEXT, include=["pattern"], top_k=3, ablate=refs([(1, 2)]))
    both = attention(clients["gpt2-export"], **body, scale="none")
    alone = attention(clients["gpt2-export"], **{**body, "ablate": []}, scale="none")
    assert both["scale"] == "none" and both["ablate"] == refs([(1, 2)])
    assert both["predictions"] != alone["predictions"]
    # an ablated head keeps its own pattern: only its output is replaced
    assert both["layers"][1]["heads"][2]["pattern"] == alone["layers"][1]["heads"][2]["pattern"]


@pytest.mark.parametrize("name", list(CASES))
def test_head_effects_equal_one_hooked_forward_per_head(name, clients, oracles):
    c = clients[name]
    ids = attention(c, text=TEXT, include=[], top_k=0)["token_ids"]
    position = len(ids) - 3
    r = c.post("/api/head-effects", json={"text": TEXT, "position": position})
    assert r.status_code == 200, r.text
    data = r.json()
    _, clean = oracle(oracles[name], ids)
    token = int(clean[position].argmax())
    assert data["position"] == position and data["token_id"] == token
    assert abs(data["logprob"] - np.log(clean[position, token])) <= TOL
    model = oracles[name]
    L, nh = len(data["delta"]), len(data["delta"][0])
    assert (L, nh) == (model.config.num_hidden_layers, model.config.num_attention_heads)
    for layer in range(L):
        for h in range(nh):
            _, probs = oracle(model, ids, [(layer, h)])
            expected = np.log(probs[position, token]) - np.log(clean[position, token])
            assert abs(data["delta"][layer][h] - expected) <= TOL, (layer, h)


def test_head_effects_defaults_and_a_chosen_token(clients):
    c = clients["llama"]
    data = c.post("/api/head-effects", json={"text": TEXT}).json()
    n = len(attention(c, text=TEXT, include=[], top_k=0)["token_ids"])
    assert data["position"] == n - 1 and data["ablation"] == "zero"
    chosen = c.post("/api/head-effects", json={"text": TEXT, "token_id": 5, "ablation": "mean"}).json()
    assert chosen["token_id"] == 5 and chosen["ablation"] == "mean"
    assert abs(chosen["prob"] - np.exp(chosen["logprob"])) <= 1e-5


@pytest.mark.parametrize(
    "body, loc, limit",
    [
        ({"ablate": [{"layer": 3, "head": 0}]}, ["body", "ablate", 0, "layer"], 2),
        ({"ablate": [{"layer": 0, "head": 0}, {"layer": 0, "head": 4}]}, ["body", "ablate", 1, "head"], 3),
    ],
)
def test_attention_refuses_an_unknown_head(body, loc, limit, clients):
    r = clients["gpt2-export"].post("/api/attention", json={"text": TEXT, **body})
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["loc"] == loc and item["ctx"]["limit"] == limit
    assert str(limit) in item["msg"]


def test_too_many_heads_is_a_422_naming_the_limit(clients):
    many = [{"layer": 0, "head": 0}] * 1025
    for path in ("/api/attention", "/api/head-effects", "/api/generate"):
        r = clients["gpt2-export"].post(path, json={"text": TEXT, "ablate": many})
        assert r.status_code == 422, path
        item = r.json()["detail"][0]
        assert item["loc"] == ["body", "ablate"] and item["ctx"]["max_length"] == 1024


@pytest.mark.parametrize(
    "body, loc, limit",
    [
        ({"position": 99}, ["body", "position"], None),
        ({"token_id": 10**6}, ["body", "token_id"], None),
        ({"ablate": [{"layer": 0, "head": 9}]}, ["body", "ablate", 0, "head"], 3),
    ],
)
def test_head_effects_refuses_out_of_range(body, loc, limit, clients):
    c = clients["gpt2-export"]
    r = c.post("/api/head-effects", json={"text": TEXT, **body})
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["loc"] == loc
    n = len(attention(c, text=TEXT, include=[], top_k=0)["token_ids"])
    expected = {"position": n - 1, "token_id": 299}.get(loc[-1], limit)  # the tokenizer's 300 tokens
    assert item["ctx"]["limit"] == expected and str(expected) in item["msg"]


def test_head_effects_refuses_bad_types(clients):
    c = clients["gpt2-export"]
    for body in ({"position": "3"}, {"position": -1}, {"ablation": "random"}, {"extra": 1}):
        r = c.post("/api/head-effects", json={"text": TEXT, **body})
        assert r.status_code == 422, body
