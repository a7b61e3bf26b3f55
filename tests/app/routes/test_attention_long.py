"""Texts as long as the model's context: accepted by tokens, answered in a size bounded by what is asked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attnscope.app.main import create_app
from attnscope.app.settings import Settings
from attnscope.model.ours.checkpoint import save_checkpoint
from attnscope.model.ours.gpt import GPT, GPTConfig
from attnscope.model.ours.tokenizer import BPETokenizer
from fastapi.testclient import TestClient

from tests.kit.textgen import english_like

CONTEXT = 4608


@pytest.fixture(scope="module")
def long_checkpoint(tmp_path_factory):
    texts = [" ".join(english_like(6, i)) for i in range(100)]
    tokenizer = BPETokenizer.train(texts, vocab_size=300)
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=CONTEXT, vocab_size=tokenizer.vocab_size, n_layer=2, n_head=2, n_embd=32))
    return save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("long") / "ckpt"), tokenizer


@pytest.fixture(scope="module")
def long_client(long_checkpoint):
    path, tokenizer = long_checkpoint
    with TestClient(create_app(Settings(checkpoint=path, device="cpu"))) as client:
        yield client, tokenizer


def long_text(tokenizer, n_tokens: int) -> str:
    words = " ".join(english_like(400, 7)).split()
    text = ""
    while len(tokenizer.encode_ids(text)) < n_tokens:
        text += " ".join(words) + " "
    ids = tokenizer.encode_ids(text)[:n_tokens]
    return tokenizer.decode(ids)


def test_a_text_of_4000_tokens_is_answered_with_bounded_fields(long_client):
    client, tokenizer = long_client
    text = long_text(tokenizer, 4200)
    body = {
        "text": text,
        "include": ["stats"],
        "stats_rows": False,
        "thumbnail": 64,
        "focus": {"layer": 1, "head": 1, "include": ["pattern", "attn_scores_raw", "stats"], "thumbnail": 128},
        "encoding": "b64",
        "top_k": 1,
    }
    r = client.post("/api/attention", json=body)
    assert r.status_code == 200, r.text[:300]
    data = r.json()
    T = len(data["tokens"])
    assert T >= 4000 and len(data["offsets"]) == T
    focus = data["focus"]
    assert focus["thumbnail"]["size"] <= 128 and focus["pattern"]["shape"] == "{0}, {0}".format(
        focus["thumbnail"]["size"]
    )
    assert data["layers"][0]["heads"][0]["thumbnail"]["shape"] == "64, 64"
    assert len(r.content) < 2_500_000
    # exact cells on request: a region of the same head
    body["focus"] = {"layer": 1, "head": 1, "include": ["pattern"], "thumbnail": 128, "region": [T - 64, T, T - 64, T]}
    region = client.post("/api/attention", json=body).json()["focus"]["region"]
    cells = np.frombuffer(__import__("base64").b64decode(region["pattern"]["bdata"]), dtype="<f4").reshape(64, 64)
    assert np.allclose(np.tril(cells).sum(-1)[-1], cells[-1].sum()) and 0 < cells[-1].sum() <= 1 + 1e-5


def test_the_limit_is_the_context_in_tokens(long_client):
    client, tokenizer = long_client
    over = long_text(tokenizer, CONTEXT + 5)
    r = client.post("/api/attention", json={"text": over, "include": [], "top_k": 0})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "text"] and detail["ctx"]["limit"] == CONTEXT
    assert detail["ctx"]["count"] > CONTEXT


MATRICES = ["pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled"]


def test_whole_matrices_past_the_limit_are_refused_before_computing(long_client):
    client, tokenizer = long_client
    text = long_text(tokenizer, 4200)
    T = len(tokenizer.encode_ids(text))
    limit = client.get("/api/model").json()["limits"]["max_matrix_cells"]
    assert 2 * 2 * 4 * T * T > limit  # 2 layers × 2 heads × 4 matrices
    r = client.post("/api/attention", json={"text": text, "include": MATRICES, "top_k": 0})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "include"] and detail["type"] == "answer_too_large"
    assert detail["ctx"] == {"limit": limit, "count": 2 * 2 * 4 * T * T}
    assert f"{limit:,}" in detail["msg"] and "thumbnail" in detail["msg"]
    # the server goes on serving: the same text at a level of detail, and whole matrices of one head
    r = client.post(
        "/api/attention",
        json={"text": text, "include": ["stats"], "thumbnail": 32, "layers": [0], "top_k": 0,
              "focus": {"layer": 1, "head": 0, "include": ["pattern"]}},
    )
    assert r.status_code == 200 and len(r.json()["focus"]["pattern"]) == T


@pytest.fixture(scope="module")
def tight_client(long_checkpoint):
    path, tokenizer = long_checkpoint
    with TestClient(create_app(Settings(checkpoint=path, device="cpu", max_matrix_cells=100_000))) as client:
        yield client, tokenizer


def test_the_limit_counts_the_grid_and_the_focus_head(tight_client):
    client, tokenizer = tight_client
    text = long_text(tokenizer, 200)
    T = len(tokenizer.encode_ids(text))
    assert client.get("/api/model").json()["limits"]["max_matrix_cells"] == 100_000

    def post(**body):
        return client.post("/api/attention", json={"text": text, "top_k": 0, **body})

    grid = post(include=["pattern"])  # 4 heads × T² = 160,000 cells
    assert grid.status_code == 422 and grid.json()["detail"][0]["loc"] == ["body", "include"]
    assert grid.json()["detail"][0]["ctx"]["count"] == 4 * T * T
    one = post(include=["pattern"], layers=[0], heads=[1])  # T² = 40,000
    assert one.status_code == 200
    # no softcap in this model, so no attn_scores_uncapped is made: 2 heads × T², not 4
    assert post(include=["pattern", "attn_scores_uncapped"], layers=[0], heads=[0, 1]).status_code == 200
    focus = {"layer": 0, "head": 0, "include": ["pattern", "attn_scores_raw", "attn_scores"]}  # 3 T² = 120,000
    r = post(include=["stats"], focus=focus)
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "focus"] and "focus.thumbnail" in detail["msg"] and "focus.region" in detail["msg"]
    both = post(include=["pattern"], layers=[0], heads=[1], focus={**focus, "include": ["pattern"]})  # 2 T²
    assert both.status_code == 200
    too_many = post(include=["pattern"], layers=[0], heads=[0, 1], focus={**focus, "include": ["pattern"]})
    assert too_many.status_code == 422
    for level in ({"thumbnail": 32}, {"region": [0, 64, 0, 64]}):  # pooled or one block: not whole matrices
        assert post(include=["stats"], focus={**focus, **level}).status_code == 200


def test_the_limit_is_a_setting(monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_MAX_MATRIX_CELLS", "5000000")
    assert Settings().max_matrix_cells == 5_000_000
