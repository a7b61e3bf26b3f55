"""POST /api/attribution and POST /api/qk-attribution over JSON, with hooked transformers as the oracle.

Served models: the GPT-2 export of a random GPT of ours (our code runs it), a Llama with GQA,
Qwen3, Gemma 2 and gpt-oss (the transformers backend); DiffLlama for the refusal.
"""

from __future__ import annotations

import pytest
import torch

from tests.kit.app import attention

pytest.importorskip("transformers")

from tests.kit.decompositions import FAMILIES, TEXT, expected_attribution, model_dirs, oracle, run  # noqa: E402
from tests.kit.family import build  # noqa: E402

NAMES = ["gpt2-export", *FAMILIES]
TOL = 1e-3  # the answers' numbers are rounded to 6 significant digits


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    """The kit's models and DiffLlama (tests/app/conftest.py's ``clients`` serves them)."""
    root = tmp_path_factory.mktemp("decomp-app")
    return {**model_dirs(root), "diffllama": build("diffllama", root / "diffllama")}


@pytest.fixture(scope="module")
def oracles(family_dirs):
    return {name: oracle(path) for name, path in family_dirs.items() if name in NAMES}


def ids_of(client, text: str) -> list[int]:
    return attention(client, text=text, include=["pattern"], layers=[0], top_k=0)["token_ids"]


@pytest.mark.parametrize("name", NAMES)
def test_attribution_answer_is_each_write_and_adds_up(name, clients, oracles):
    body = clients[name].post("/api/attribution", json={"text": TEXT, "position": 12}).json()
    ids = ids_of(clients[name], TEXT)
    heads, mlps, embed, logit = expected_attribution(oracles[name], ids, 12, body["token_id"])
    scale = TOL * (1.0 + heads.abs().max().item())
    assert (torch.tensor(body["heads"], dtype=torch.float64) - heads).abs().max() <= scale
    assert (torch.tensor(body["mlps"], dtype=torch.float64) - mlps).abs().max() <= scale
    assert body["embed"] == pytest.approx(float(embed), abs=scale)
    total = sum(map(sum, body["heads"])) + sum(body["mlps"]) + body["embed"] + body["rest"]
    assert total == pytest.approx(body["logit"], abs=TOL * (1.0 + abs(body["logit"])))
    cap = body["final_softcap"]
    shown = body["logit"] if cap is None else cap * torch.tanh(torch.tensor(body["logit"] / cap)).item()
    assert shown == pytest.approx(float(logit), abs=TOL * (1.0 + abs(shown)))
    assert (cap is not None) == (name == "gemma2")
    assert "final norm" in body["frozen"] and "frozen" in body["frozen"]
    assert body["token"] and body["position"] == 12


@pytest.mark.parametrize("name", NAMES)
def test_qk_answer_adds_up_to_the_served_and_eager_score(name, clients, oracles):
    layer, head, query, key = 1, 1, 20, 9
    body = (
        clients[name]
        .post("/api/qk-attribution", json={"text": TEXT, "layer": layer, "head": head, "query": query, "key": key})
        .json()
    )
    served_raw = attention(clients[name], text=TEXT, include=["attn_scores_raw"], layers=[layer], top_k=0)
    raw = served_raw["layers"][0]["heads"][head]["attn_scores_raw"][query][key]
    seen, _, _ = run(oracles[name], served_raw["token_ids"])
    q, k = seen["qk"][layer]
    eager = float(q[head, query].double() @ k[head // (q.shape[0] // k.shape[0]), key].double())
    tol = TOL * (1.0 + abs(eager))
    assert body["masked"] == (raw is None)  # Mistral's window of 5 tokens hides key 9 from query 20
    assert body["score"] == pytest.approx(eager, abs=tol)
    if raw is not None:
        assert body["score"] == pytest.approx(raw, abs=tol)
    assert sum(map(sum, body["matrix"])) == pytest.approx(body["score"], abs=tol)
    n = len(body["components"])
    assert len(body["matrix"]) == n and all(len(row) == n for row in body["matrix"])
    assert body["components"][0] == "embed" and body["components"][-1] == "bias"
    assert "L0H0" in body["components"] and "L0.mlp" in body["components"]
    assert "frozen" in body["frozen"]


BAD = [
    ("/api/attribution", {"position": 999}, "position"),
    ("/api/attribution", {"token_id": 10**6}, "token_id"),
    ("/api/qk-attribution", {"layer": 99, "head": 0, "query": 3, "key": 1}, "layer"),
    ("/api/qk-attribution", {"layer": 1, "head": 99, "query": 3, "key": 1}, "head"),
    ("/api/qk-attribution", {"layer": 1, "head": 0, "query": 999, "key": 1}, "query"),
    ("/api/qk-attribution", {"layer": 1, "head": 0, "query": 3, "key": 999}, "key"),
]


@pytest.mark.parametrize("path, extra, field", BAD)
def test_bad_input_is_a_422_naming_the_field(path, extra, field, clients):
    response = clients["llama"].post(path, json={"text": TEXT, **extra})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", field]
    assert field in response.json()["detail"][0]["msg"]
    assert clients["llama"].get("/healthz").status_code == 200


@pytest.mark.parametrize(
    "path, extra", [("/api/attribution", {}), ("/api/qk-attribution", {"layer": 1, "head": 0, "query": 3, "key": 1})]
)
def test_a_model_that_cannot_be_split_is_a_422_naming_why(path, extra, clients):
    response = clients["diffllama"].post(path, json={"text": TEXT, **extra})
    assert response.status_code == 422, response.text
    assert "differential attention" in response.json()["detail"][0]["msg"]
