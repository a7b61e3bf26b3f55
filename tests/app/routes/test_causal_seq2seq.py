"""POST /api/attribution, /api/qk-attribution and /api/patching on encoder-decoders (T5, BART), with
transformers' eager model as the oracle: the parts add up to its logit, the terms to its q·kᵀ, and
patching every piece of a clean source into the corrupt run restores the clean difference."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoModelForSeq2SeqLM  # noqa: E402

from tests.kit.app import served  # noqa: E402
from tests.kit.seq2seq import build_seq2seq  # noqa: E402

FAMILIES = ["t5", "bart"]
SOURCE = "The cat sat on the mat, and the dog saw the cat."
CORRUPT = "Then the dog ran to the red door and sat."  # a source of another length: the decoder reads it whole
TARGET = "A dog sat on the log."
TOL = 1e-3  # the answers' numbers are rounded to 6 significant digits


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("s2s_causal_app")
    return {f: build_seq2seq(f, root / f) for f in FAMILIES}


@pytest.fixture(scope="module")
def clients(folders):
    with served(folders) as out:
        yield out


def post(client, url: str, **body) -> dict:
    response = client.post(url, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def eager_logits(folder, source: list[int], target: list[int]) -> torch.Tensor:
    ref = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        return ref(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target])).logits[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_attribution_splits_the_decoders_logit_into_self_and_cross_heads(family, folders, clients):
    body = post(clients[family], "/api/attribution", text=SOURCE, target=TARGET, token_id=9)
    logits = eager_logits(folders[family], body["source_ids"], body["target_ids"])
    assert body["position"] == len(body["target_ids"]) - 1  # the last target token by default
    want = float(logits[body["position"], 9])
    total = sum(map(sum, body["heads"])) + sum(map(sum, body["cross_heads"])) + sum(body["mlps"])
    assert total + body["embed"] + body["rest"] == pytest.approx(want, abs=TOL * (1 + abs(want)))
    assert len(body["heads"]) == len(body["cross_heads"]) == len(body["mlps"]) == 2
    assert all(len(row) == 4 for row in body["heads"] + body["cross_heads"])
    assert body["token_id"] == 9 and "frozen" in body["frozen"] and body["target"] == TARGET


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stack", ["encoder", "decoder", "cross"])
def test_qk_attribution_in_each_stack_adds_up_to_the_served_score(family, stack, clients):
    client = clients[family]
    layer, head, query, key = 1, 2, 3, 2
    body = post(client, "/api/qk-attribution", text=SOURCE, target=TARGET, stack=stack, layer=layer, head=head,
                query=query, key=key)
    served_ = post(client, "/api/attention", text=SOURCE, target=TARGET, stack=stack,
                   include=["attn_scores_raw", "attn_scores"], layers=[layer], top_k=0)
    cell = served_["layers"][0]["heads"][head]
    raw, seen = cell["attn_scores_raw"][query][key], cell["attn_scores"][query][key]
    assert body["score"] == pytest.approx(raw, abs=TOL * (1 + abs(raw)))
    assert sum(map(sum, body["matrix"])) == pytest.approx(raw, abs=TOL * (1 + abs(raw)))
    assert body["attn_scores"] == pytest.approx(seen, abs=TOL * (1 + abs(seen)))
    keys = served_["source_tokens"] if stack == "cross" else served_["tokens"]
    assert body["key_token"] == keys[key] and body["query_token"] == served_["tokens"][query]
    assert ("key_components" in body) == (stack == "cross")
    assert ("position_bias" in body) == (family == "t5" and stack != "cross")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stack", ["decoder", "cross"])
def test_patching_two_sources_with_one_target(family, stack, clients):
    """The clean source's pieces written into the corrupt source's run, one target for both: the decoder's
    residual stream after its last block at the position read restores the whole difference (1); the first
    layer's self heads read only the target, the same in both runs, and restore nothing (0); its cross heads
    read the source."""
    client = clients[family]
    body = post(client, "/api/patching", clean=SOURCE, corrupt=CORRUPT, target=TARGET, stack=stack, what="residual")
    assert body["source_tokens"] != body["corrupt_source_tokens"] and body["tokens"] == body["corrupt_tokens"]
    gap = abs(body["clean_diff"] - body["corrupt_diff"])
    tol = 1e-5 * (1 + abs(body["clean_diff"])) / gap  # a share's precision: a logit's (fp32) over the gap
    assert body["residual"][-1][body["position"]] == pytest.approx(1.0, abs=tol)
    heads = post(client, "/api/patching", clean=SOURCE, corrupt=CORRUPT, target=TARGET, stack=stack)
    assert len(heads["heads"]) == 2 and all(len(row) == 4 for row in heads["heads"])
    assert heads["clean_diff"] == body["clean_diff"] and heads["corrupt_diff"] == body["corrupt_diff"]
    if stack == "decoder":
        assert all(abs(v) < tol for v in heads["heads"][0])
    else:
        assert any(abs(v) > tol for v in heads["heads"][0])


def test_patching_the_encoder_needs_sources_of_one_length(clients):
    r = clients["t5"].post("/api/patching", json={"clean": SOURCE, "corrupt": "A cat.", "target": TARGET,
                                                   "stack": "encoder"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "corrupt"]
    ok = post(clients["t5"], "/api/patching", clean=SOURCE, corrupt="A cat.", target=TARGET, stack="cross")
    assert ok["corrupt_source_tokens"] and ok["what"] == "heads"
