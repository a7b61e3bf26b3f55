"""The API over encoder-decoders (T5, BART): what /api/model says, each stack's answer (its tokens,
mask and patterns against transformers eager on the ids the server reports), a target typed or
written by the model, and the 422s naming ``target`` and ``stack``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.kit.app import attention, served

pytest.importorskip("transformers")

from transformers import AutoModelForSeq2SeqLM, AutoTokenizer  # noqa: E402

from tests.kit.encoders import build_encoder  # noqa: E402
from tests.kit.seq2seq import build_seq2seq  # noqa: E402

FAMILIES = ["t5", "bart"]
SOURCE = "The cat sat on the mat, and the dog saw the cat."
TARGET = "A dog sat on the log."
EAGER = {"encoder": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("seq2seq")
    return {f: build_seq2seq(f, root / f) for f in FAMILIES} | {"bert": build_encoder("bert", root / "bert")}


@pytest.fixture(scope="module")
def clients(folders, checkpoint_dir):
    with served({**folders, "ours": checkpoint_dir}) as out:
        yield out


def eager(folder, source, target):
    ref = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager")
    with torch.no_grad():
        return ref(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target]), output_attentions=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_model_says_encoder_decoder_with_three_stacks(family, clients):
    info = clients[family].get("/api/model").json()
    assert info["architecture"] == "encoder-decoder" and "target" in info["subject"]
    assert [(s["name"], s["query"], s["key"]) for s in info["stacks"]] == [
        ("encoder", "source", "source"), ("decoder", "target", "target"), ("cross", "target", "source")
    ]
    assert all(s["n_layer"] == 2 and s["n_head"] == 4 for s in info["stacks"])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stack", ["encoder", "decoder", "cross"])
def test_each_stack_equals_eager_on_the_ids_served(family, stack, folders, clients):
    data = attention(clients[family], text=SOURCE, target=TARGET, stack=stack, include=["pattern"], top_k=3)
    reference = AutoTokenizer.from_pretrained(folders[family])
    assert data["source_ids"] == reference(SOURCE)["input_ids"]
    assert data["target_generated"] is False and data["target"] == TARGET
    assert data["target_ids"][1:] == reference(TARGET, add_special_tokens=False)["input_ids"]
    query = data["source_ids"] if stack == "encoder" else data["target_ids"]
    keys = data["target_ids"] if stack == "decoder" else data["source_ids"]
    assert data["stack"] == stack and data["token_ids"] == query
    assert data["tokens"] == (data["source_tokens"] if stack == "encoder" else data["target_tokens"])
    assert data["causal"] is (stack == "decoder")
    mask = np.array(data["mask"], dtype=bool)
    assert mask.shape == (len(query), len(keys))
    assert np.array_equal(mask, np.tril(np.ones_like(mask)) if stack == "decoder" else np.ones_like(mask))
    out = eager(folders[family], data["source_ids"], data["target_ids"])
    for layer, expected in zip(data["layers"], getattr(out, EAGER[stack]), strict=True):
        for head in layer["heads"]:
            np.testing.assert_allclose(head["pattern"], expected[0, head["head"]].numpy(), atol=2e-5)
    # the decoder's next-token guesses at each target position, whichever the stack
    assert len(data["predictions"]) == len(data["target_ids"])
    for row, logits in zip(data["predictions"], out.logits[0]):
        assert row[0]["id"] == int(logits.argmax())


def test_t5_answers_divisor_one(clients):
    for stack in ("encoder", "decoder", "cross"):
        data = attention(clients["t5"], text=SOURCE, target=TARGET, stack=stack, include=["pattern"])
        assert data["divisor"] == 1.0 and {layer["divisor"] for layer in data["layers"]} == {1.0}


@pytest.mark.parametrize("family", FAMILIES)
def test_without_a_target_the_model_writes_one_as_generate_does(family, folders, clients):
    data = attention(clients[family], text=SOURCE, include=["pattern"])
    assert data["stack"] == "decoder" and data["target_generated"] is True
    ref = AutoModelForSeq2SeqLM.from_pretrained(folders[family], attn_implementation="eager")
    with torch.no_grad():
        expected = ref.generate(torch.tensor([data["source_ids"]]), do_sample=False, max_new_tokens=32)
    assert data["target_ids"] == expected[0].tolist() == data["token_ids"]
    assert len(data["offsets"]) == len(data["target_ids"])
    assert all(0 <= a <= b <= len(data["target"]) for a, b in data["offsets"])


def test_target_and_stack_are_refused_naming_the_field(clients):
    for name in ("ours", "bert"):
        r = clients[name].post("/api/attention", json={"text": SOURCE, "target": TARGET})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "target"]
    r = clients["ours"].post("/api/attention", json={"text": SOURCE, "stack": "cross"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "stack"]
    r = clients["t5"].post("/api/attention", json={"text": SOURCE, "target": "   "})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "target"]


def test_a_long_source_pools_every_stack_with_one_block_for_both_axes(clients):
    """The level-of-detail path on a cross map of T_target × S_source: one k for both axes, each pooled
    cell the maximum of its k×k block of the full pattern."""
    source = " ".join([SOURCE] * 6)
    for stack in ("encoder", "decoder", "cross"):
        body = dict(text=source, target=TARGET, stack=stack, layers=[1], heads=[2])
        full = np.array(attention(clients["t5"], **body, include=["pattern"])["layers"][0]["heads"][0]["pattern"])
        pooled = attention(clients["t5"], **body, include=[], thumbnail=16)
        k = pooled["thumbnail"]["block"]
        T, S = full.shape
        assert k == -(-max(T, S) // 16)
        thumb = np.array(pooled["layers"][0]["heads"][0]["thumbnail"]) / 255
        assert thumb.shape == np.array(pooled["thumbnail"]["mask"]).shape == (-(-T // k), -(-S // k))
        for i in range(thumb.shape[0]):
            for j in range(thumb.shape[1]):
                assert abs(thumb[i, j] - full[i * k : (i + 1) * k, j * k : (j + 1) * k].max()) <= 0.5 / 255 + 1e-5


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_streams_generates_tokens_with_their_cross_rows(family, folders, clients):
    import json

    r = clients[family].post("/api/generate", json={"text": SOURCE, "max_new_tokens": 5})
    assert r.status_code == 200
    lines = [json.loads(line) for line in r.text.splitlines()]
    steps, done = lines[:-1], lines[-1]
    source, start = steps[0]["source_ids"], steps[0]["target_ids"]
    assert done["done"] is True and done["tokens"] == len(steps)
    ref = AutoModelForSeq2SeqLM.from_pretrained(folders[family], attn_implementation="eager")
    with torch.no_grad():
        expected = ref.generate(torch.tensor([source]), do_sample=False, max_new_tokens=5)[0].tolist()
    target = start + [s["token_id"] for s in steps]
    assert target == expected
    out = eager(folders[family], source, target[:-1])  # each step's query: the token before the new one
    for t, step in enumerate(steps):
        assert np.array(step["cross"]).shape == (2, 4, len(source))
        for layer, rows in enumerate(step["cross"]):
            np.testing.assert_allclose(rows, out.cross_attentions[layer][0, :, t].numpy(), atol=2e-5)
            np.testing.assert_allclose(
                step["attention"][layer], out.decoder_attentions[layer][0, :, t, : t + 1].numpy(), atol=2e-5
            )


def test_views_not_defined_on_a_stack_say_so_naming_stack(clients):
    """Rollout multiplies square maps: the cross stack is refused; direct attribution, the why split and
    patching answer on every stack (tests/app/routes/test_causal_seq2seq.py)."""
    c = clients["bart"]
    r = c.post("/api/rollout", json={"text": SOURCE, "target": TARGET, "stack": "cross"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "stack"], r.text
    for stack in ("encoder", "decoder"):  # rollout over a square stack answers
        r = c.post("/api/rollout", json={"text": SOURCE, "target": TARGET, "stack": stack})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_t5_statistics_are_those_of_its_biased_scores(stack, clients):
    """T5's scores are q·kᵀ plus a position bias, no multiple of the raw ones: the statistics of the
    scores and the scaled entropy are taken from the scores and the pattern themselves."""
    data = attention(
        clients["t5"], text=SOURCE, target=TARGET, stack=stack, layers=[0], heads=[1],
        include=["attn_scores", "attn_scores_raw", "pattern", "stats"], stats_rows=True,
    )
    head = data["layers"][0]["heads"][0]
    mask = np.array(data["mask"], dtype=bool)
    scores, raw = np.array(head["attn_scores"], dtype=float), np.array(head["attn_scores_raw"], dtype=float)
    pattern = np.array(head["pattern"], dtype=float)
    assert not np.allclose(scores[mask], raw[mask])  # the bias is there
    stats = head["stats"]
    assert stats["var_scores"] == pytest.approx(scores[mask].var(), rel=1e-4)
    assert stats["var_scores_raw"] == pytest.approx(raw[mask].var(), rel=1e-4)
    logs = np.where(pattern > 0, np.log(np.where(pattern > 0, pattern, 1)), 0)
    row_entropy = -(pattern * logs).sum(-1)
    np.testing.assert_allclose(stats["row_entropy"], row_entropy, atol=1e-3)  # the pattern sent to 5 decimals


@pytest.mark.parametrize("family", FAMILIES)
def test_the_lens_reads_the_decoders_residual_stream(family, folders, clients):
    """After the embeddings and after each decoder layer, the lens's top token is the LM head's (the final
    norm first) on eager's decoder hidden state there; after the last layer, the model's own guess."""
    c = clients[family]
    data = c.post("/api/lens", json={"text": SOURCE, "target": TARGET, "top_k": 3}).json()
    served = attention(c, text=SOURCE, target=TARGET, include=[])
    assert data["tokens"] == served["target_tokens"] and len(data["residuals"]) == 3  # embed, layer 0, layer 1
    ref = AutoModelForSeq2SeqLM.from_pretrained(folders[family], attn_implementation="eager")
    with torch.no_grad():
        out = ref(
            input_ids=torch.tensor([served["source_ids"]]), decoder_input_ids=torch.tensor([served["target_ids"]]),
            output_hidden_states=True,
        )
        dec = ref.get_decoder()
        norm = getattr(dec, "final_layer_norm", None) or getattr(dec, "layer_norm", None) or torch.nn.Identity()
        for i, residual in enumerate(data["residuals"][:-1]):
            h = norm(out.decoder_hidden_states[i][0])
            if family == "t5" and ref.config.tie_word_embeddings:
                h = h * ref.config.d_model**-0.5
            logits = ref.lm_head(h) + getattr(ref, "final_logits_bias", torch.zeros(1))[0]
            assert [row[0]["id"] for row in residual["top"]] == logits.argmax(-1).tolist()
    assert [row[0]["id"] for row in data["residuals"][-1]["top"]] == out.logits[0].argmax(-1).tolist()
    r = c.post("/api/lens", json={"text": SOURCE, "target": TARGET, "stack": "encoder"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "stack"]


def test_knockout_on_the_cross_stack_takes_source_keys(clients):
    c = clients["bart"]
    served = attention(c, text=SOURCE, target=TARGET, include=[])
    S, T = len(served["source_ids"]), len(served["target_ids"])
    assert S > T + 2
    edges = [{"layer": layer, "query": [0, T], "key": [T, S]} for layer in (0, 1)]  # keys past the target's length
    r = c.post("/api/knockout", json={"text": SOURCE, "target": TARGET, "stack": "cross", "edges": edges})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["tokens"] == served["target_tokens"] and got["logprob_after"] != got["logprob_before"]
    r = c.post("/api/knockout", json={"text": SOURCE, "target": TARGET, "stack": "decoder", "edges": edges})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "edges"]  # keys past the target
    r = c.post("/api/knockout", json={"text": SOURCE, "target": TARGET, "stack": "encoder", "edges": edges})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "stack"]


@pytest.mark.parametrize("stack", ["encoder", "decoder", "cross"])
def test_head_effects_switch_heads_off_in_the_stack_and_read_a_target_position(stack, clients):
    c = clients["t5"]
    served = attention(c, text=SOURCE, target=TARGET, include=[], top_k=1)
    position = 3  # a target token's, whichever the stack
    body = {"text": SOURCE, "target": TARGET, "stack": stack, "position": position}
    r = c.post("/api/head-effects", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    guess = served["predictions"][position][0]
    assert got["position"] == position and got["token_id"] == guess["id"]
    assert got["logprob"] == pytest.approx(np.log(guess["prob"]), abs=1e-4)
    delta = np.array(got["delta"])
    assert delta.shape == (2, 4) and np.abs(delta).max() > 1e-3
    # one head switched off by /api/attention's what-if: the decoder's guess there moves by that head's delta
    (layer, head) = np.unravel_index(np.abs(delta).argmax(), delta.shape)
    ablated = attention(
        c, text=SOURCE, target=TARGET, stack=stack, include=[], top_k=50,
        ablate=[{"layer": int(layer), "head": int(head)}],
    )
    prob = next(p["prob"] for p in ablated["predictions"][position] if p["id"] == guess["id"])
    assert np.log(prob) - got["logprob"] == pytest.approx(delta[layer, head], abs=2e-3)


def test_the_cross_stack_takes_source_positions_on_its_key_side(clients):
    """A cross map's columns are the source's: a focus region and a selection's keys past the target's length."""
    c = clients["bart"]
    full = attention(c, text=SOURCE, target="A dog", stack="cross", layers=[0], heads=[1], include=["pattern"])
    pattern = np.array(full["layers"][0]["heads"][0]["pattern"])
    T, S = pattern.shape
    assert S > T + 4
    region = [0, T, T + 1, S]
    got = attention(
        c, text=SOURCE, target="A dog", stack="cross", layers=[0], heads=[1], include=[],
        focus={"layer": 0, "head": 1, "region": region, "include": ["pattern"]},
    )
    np.testing.assert_allclose(got["focus"]["region"]["pattern"], pattern[:, T + 1 : S], atol=1e-5)
    keys = [T + 1, S - 1]
    r = c.post("/api/selection", json={
        "text": SOURCE, "target": "A dog", "stack": "cross", "layer": 0, "head": 1, "queries": [1], "keys": keys,
    })
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["to_keys"], pattern[:, keys].mean(1), atol=1e-4)
    np.testing.assert_allclose(r.json()["from_queries"], pattern[1], atol=1e-4)
    r = c.post("/api/selection", json={
        "text": SOURCE, "target": "A dog", "stack": "cross", "layer": 0, "head": 1, "queries": [T], "keys": [0],
    })
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "queries", 0]


def test_a_target_over_the_context_is_refused_naming_it(clients):
    c = clients["bart"]
    limit = c.get("/api/model").json()["block_size"]
    r = c.post("/api/attention", json={"text": SOURCE, "target": " dog" * (limit + 1)})
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "target"] and item["ctx"]["limit"] == limit and item["ctx"]["count"] > limit
