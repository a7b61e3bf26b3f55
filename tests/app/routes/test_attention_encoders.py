"""The API over encoders (BERT and its kin): what /api/model says, the answer's tokens, mask and
patterns against transformers eager on the ids the server reports, the masked-LM guesses at a
``[MASK]``, ``stack`` and the views an encoder refuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.kit.app import attention, served

pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer  # noqa: E402

from tests.kit.encoders import build_encoder  # noqa: E402

# WordPiece, byte-level BPE, Unigram; ModernBERT's band; DeBERTa's three terms
FAMILIES = ["bert", "roberta", "albert", "modernbert", "deberta-v2"]
PARTS = ["attn_scores_content", "attn_scores_content_position", "attn_scores_position_content"]
TEXT = "The cat [MASK] on the mat, and the dog saw the cat."


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("encoders")
    return {f: build_encoder(f, root / f) for f in FAMILIES}


@pytest.fixture(scope="module")
def clients(folders, checkpoint_dir):
    with served({**folders, "ours": checkpoint_dir}) as out:
        yield out


def eager(folder, ids):
    ref = AutoModelForMaskedLM.from_pretrained(folder, attn_implementation="eager")
    with torch.no_grad():
        return ref(torch.tensor([ids]), output_attentions=True)


def test_model_says_its_architecture_and_stacks(clients):
    for name, c in clients.items():
        info = c.get("/api/model").json()
        kind, side = ("decoder", "target") if name == "ours" else ("encoder", "source")
        assert info["architecture"] == kind
        assert info["stacks"] == [
            {"name": kind, "n_layer": info["n_layer"], "n_head": info["n_head"], "query": side, "key": side}
        ]


@pytest.mark.parametrize("family", FAMILIES)
def test_served_patterns_and_guesses_equal_eager(family, folders, clients):
    c = clients[family]
    data = attention(c, text=TEXT, include=["pattern"], top_k=5)
    reference = AutoTokenizer.from_pretrained(folders[family])
    assert data["token_ids"] == reference(TEXT.replace("[MASK]", reference.mask_token))["input_ids"]
    assert data["stack"] == "encoder" and data["causal"] is False
    out = eager(folders[family], data["token_ids"])
    mask = np.array(data["mask"]).astype(bool)
    for lv in data["layers"]:
        layer_mask = np.array(lv["mask"]).astype(bool) if "mask" in lv else mask
        expected = out.attentions[lv["layer"]][0].numpy()
        assert (expected[:, ~layer_mask] == 0).all()  # the served mask is the one eager applied
        assert layer_mask[np.triu_indices(len(layer_mask), 1)].any()  # no causal triangle
        for hv in lv["heads"]:
            assert np.abs(np.array(hv["pattern"]) - expected[hv["head"]]).max() <= 2e-5
    # the guesses at each position, the [MASK] first: the masked-LM head's top 5 there
    at = data["token_ids"].index(reference.mask_token_id)
    probs = out.logits[0].softmax(-1)
    for t in (at, 0, len(data["token_ids"]) - 1):
        top = probs[t].topk(5)
        assert [p["id"] for p in data["predictions"][t]] == top.indices.tolist()
        np.testing.assert_allclose([p["prob"] for p in data["predictions"][t]], top.values.numpy(), rtol=1e-4)


def test_causal_false_is_accepted_and_changes_nothing(clients):
    c = clients["modernbert"]
    plain = attention(c, text=TEXT, include=["pattern"], top_k=0)
    opened = attention(c, text=TEXT, include=["pattern"], top_k=0, causal=False)
    assert opened["causal"] is False
    assert opened["layers"] == plain["layers"] and opened["mask"] == plain["mask"]
    assert np.array(plain["mask"]).all()  # the global layer: every row sees every key
    local = [lv for lv in plain["layers"] if "mask" in lv]
    assert local and all(not np.array(lv["mask"]).all() for lv in local)  # the band of the local layers


def test_stack_the_model_lacks_is_a_422_naming_stack(clients):
    for name, wrong, right in (("bert", "decoder", "encoder"), ("ours", "encoder", "decoder")):
        r = clients[name].post("/api/attention", json={"text": TEXT, "stack": wrong, "top_k": 0})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "stack"]
        assert attention(clients[name], text=TEXT, stack=right, top_k=0)["stack"] == right
    r = clients["bert"].post("/api/neuron", json={"text": TEXT, "layer": 0, "head": 0, "stack": "cross"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "stack"]


def test_writing_tokens_is_refused_on_an_encoder_naming_max_new_tokens(clients):
    r = clients["bert"].post("/api/generate", json={"text": TEXT})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "max_new_tokens"]
    assert "encoder" in r.json()["detail"][0]["msg"]


@pytest.mark.parametrize("family", ["bert", "modernbert", "deberta-v2"])
def test_the_lens_reads_each_layer_through_the_masked_lm_head(family, clients):
    c = clients[family]
    data = attention(c, text=TEXT, top_k=3)
    got = c.post("/api/lens", json={"text": TEXT, "top_k": 3}).json()
    n_layer = c.get("/api/model").json()["n_layer"]
    assert [r["after"] for r in got["residuals"]] == ["embed", *range(n_layer)]
    # after the last layer (and the final norm, ModernBERT's), the head's guesses are the model's own
    last = [[p["id"] for p in row] for row in got["residuals"][-1]["top"]]
    assert last == [[p["id"] for p in row] for row in data["predictions"]]


def test_the_lens_refuses_albert_whose_layers_are_one_module(clients):
    r = clients["albert"].post("/api/lens", json={"text": TEXT})
    assert r.status_code == 422 and "one module" in r.json()["detail"][0]["msg"]


def test_head_effects_and_knockout_measure_the_guess_at_the_first_mask(clients):
    c = clients["bert"]
    data = attention(c, text=TEXT, top_k=1)
    r = c.post("/api/head-effects", json={"text": TEXT})
    assert r.status_code == 200
    got = r.json()
    at = data["tokens"].index("[MASK]")
    assert got["position"] == at and got["token_id"] == data["predictions"][at][0]["id"]
    edge = {"layer": 0, "query": at, "key": 1}
    knocked = c.post("/api/knockout", json={"text": TEXT, "edges": [edge]}).json()
    assert knocked["position"] == at and knocked["token_id"] == got["token_id"]


def test_patching_reads_the_first_mask_by_default_as_the_other_routes(clients):
    c = clients["bert"]
    body = {"clean": TEXT, "corrupt": TEXT.replace("cat", "dog"), "what": "residual"}
    got = c.post("/api/patching", json=body).json()
    at = got["tokens"].index("[MASK]")
    assert got["position"] == at != len(got["tokens"]) - 1
    assert got == {**c.post("/api/patching", json={**body, "position": at}).json(), "timing_ms": got["timing_ms"]}
    decoder = clients["ours"].post("/api/patching", json=body).json()  # a decoder: the last position, as before
    assert decoder["position"] == len(decoder["tokens"]) - 1


def test_deberta_sends_its_three_terms_adding_up_to_the_raw_scores(clients):
    c = clients["deberta-v2"]
    info = c.get("/api/model").json()
    assert info["score_parts"] and info["divisor_rule"] == "sqrt(3 * head_dim)"
    data = attention(c, text=TEXT, include=["attn_scores_raw", *PARTS], top_k=0)
    for lv in data["layers"]:
        for hv in lv["heads"]:
            total = sum(np.array(hv[name], dtype=float) for name in PARTS)
            np.testing.assert_allclose(total, np.array(hv["attn_scores_raw"], dtype=float), atol=3e-4)
    plain = attention(clients["bert"], text=TEXT, include=["attn_scores_raw", *PARTS], top_k=0)
    assert not any(name in hv for lv in plain["layers"] for hv in lv["heads"] for name in PARTS)


def test_every_subject_route_checks_stack(clients):
    c = clients["bert"]
    for url, body in (
        ("/api/rollout", {"text": TEXT}),
        ("/api/head-effects", {"text": TEXT}),
        ("/api/patching", {"clean": TEXT, "corrupt": TEXT.replace("cat", "dog")}),
        ("/api/compare-texts", {"text": TEXT, "text_b": TEXT, "layer": 0, "head": 0}),
    ):
        r = c.post(url, json={**body, "stack": "decoder"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "stack"], url
        assert c.post(url, json={**body, "stack": "encoder"}).status_code == 200, url


def test_a_text_of_the_whole_context_runs_and_one_more_token_is_refused(folders, clients):
    c = clients["roberta"]
    limit = c.get("/api/model").json()["block_size"]
    config = AutoConfig.from_pretrained(folders["roberta"])
    assert limit == config.max_position_embeddings - config.pad_token_id - 1  # positions start after the pad id
    reference = AutoTokenizer.from_pretrained(folders["roberta"])
    n_words = next(n for n in range(1, 400) if len(reference(" cat" * n)["input_ids"]) == limit)
    full = attention(c, text=" cat" * n_words, top_k=1)
    assert len(full["token_ids"]) == limit
    r = c.post("/api/attention", json={"text": " cat" * (n_words + 1), "top_k": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "too_many_tokens"


@pytest.mark.parametrize("family", FAMILIES)
def test_direct_attribution_says_why_an_encoder_logit_is_not_split(family, clients):
    """A masked-LM head is not linear in the residual stream (dense, activation, norm): no exact split, a 422
    naming ``stack`` that says so and points at the views that do answer; the server keeps serving."""
    c = clients[family]
    r = c.post("/api/attribution", json={"text": TEXT})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "stack"] and detail["type"] == "encoder_head_nonlinear"
    assert "masked-LM" in detail["msg"] and "/api/lens" in detail["msg"]
    assert c.get("/api/model").status_code == 200


def test_qk_attribution_splits_a_bert_score_and_refuses_albert_and_deberta_saying_why(folders, clients):
    """BERT's terms add up to eager's raw score (its q and k from hooks on the query and key modules); ALBERT
    (one shared layer) and DeBERTa (disentangled) are a 422 that says why; RoBERTa is split too."""
    layer, head, query, key = 1, 2, 4, 1
    for family in ("bert", "roberta"):
        r = clients[family].post("/api/qk-attribution", json={"text": TEXT, "layer": layer, "head": head,
                                                               "query": query, "key": key})
        assert r.status_code == 200, r.text
        got = r.json()
        ids = attention(clients[family], text=TEXT, top_k=0)["token_ids"]
        ref = AutoModelForMaskedLM.from_pretrained(folders[family], attn_implementation="eager").eval()
        attn, kept = ref.base_model.encoder.layer[layer].attention.self, {}
        hooks = [attn.query.register_forward_hook(lambda m, a, out, kept=kept: kept.__setitem__("q", out[0])),
                 attn.key.register_forward_hook(lambda m, a, out, kept=kept: kept.__setitem__("k", out[0]))]
        with torch.no_grad():
            ref(torch.tensor([ids]))
        for h in hooks:
            h.remove()
        nh = ref.config.num_attention_heads
        q, k = (kept[n].view(len(ids), nh, -1)[:, head].double() for n in ("q", "k"))
        raw = float(q[query] @ k[key])
        matrix = np.array(got["matrix"], dtype=float)
        assert matrix.shape == (len(got["components"]),) * 2 and "key_components" not in got
        assert matrix.sum() == pytest.approx(raw, abs=1e-3 * (1 + abs(raw)))
        assert got["score"] == pytest.approx(raw, abs=1e-3 * (1 + abs(raw)))
        assert got["components"][0] == "embed" and "L0H0" in got["components"] and got["masked"] is False
    for family, why in (("albert", "one module"), ("deberta-v2", "disentangled")):
        body = {"text": TEXT, "layer": 0, "head": 0, "query": 1, "key": 2}
        r = clients[family].post("/api/qk-attribution", json=body)
        assert r.status_code == 422 and why in r.json()["detail"][0]["msg"]
