"""Every encoder-decoder family on the routes (tests/kit/seq2seq.py: T5, mT5, UMT5, BART, mBART, Marian,
Pegasus, T5Gemma and T5Gemma 2, each tiny and built in the test): POST /api/attention's three stacks equal to
transformers eager (``encoder_attentions``, ``decoder_attentions``, ``cross_attentions``) on the ids the server
reports, the target it writes equal to ``generate()``'s, and /api/generate's rows those of eager on the target
it wrote. One model served at a time."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.kit.app import attention, served

pytest.importorskip("transformers")

from transformers import AutoModelForSeq2SeqLM  # noqa: E402

from tests.kit.seq2seq import SEQ2SEQ, build_seq2seq, model_type  # noqa: E402

SOURCE = "The cat sat on the mat, and the dog saw the cat."
TARGET = "A dog sat on the log."
EAGER = {"encoder": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}
WRITTEN = 32  # the most tokens /api/attention writes of a target (generate()'s default)
NEW = 4  # tokens /api/generate streams


@pytest.fixture(scope="module", params=list(SEQ2SEQ))
def family(request, tmp_path_factory):
    """(family, its folder, a client serving it, transformers eager's model of it)."""
    name = request.param
    folder = build_seq2seq(name, tmp_path_factory.mktemp("s2s") / name)
    ref = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    with served({name: folder}) as clients:
        yield name, folder, clients[name], ref


def run_eager(ref, source, target):
    with torch.no_grad():
        return ref(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([target]), output_attentions=True)


def test_every_stack_equals_eager_on_the_ids_served(family):
    name, _, client, ref = family
    info = client.get("/api/model").json()
    assert info["family"] == model_type(name) and info["architecture"] == "encoder-decoder"
    merged = name == "t5gemma2"  # one softmax over the decoder's keys and the encoder's
    assert [s["merged_softmax"] for s in info["stacks"]] == [False, merged, merged]
    rows = {}
    for stack in ("encoder", "decoder", "cross"):
        data = attention(
            client, text=SOURCE, target=TARGET, stack=stack, include=["pattern", "stats"], stats_rows=True, top_k=1
        )
        assert data["stack"] == stack and data["target_generated"] is False
        out = run_eager(ref, data["source_ids"], data["target_ids"])
        expected = getattr(out, EAGER[stack])
        assert len(data["layers"]) == len(expected)
        for layer, e in zip(data["layers"], expected, strict=True):
            for head in layer["heads"]:
                np.testing.assert_allclose(head["pattern"], e[0, head["head"]].numpy(), atol=2e-5)
                # each row's entropy, -Σ p ln p over the weights shown (a block of a shared softmax: its own)
                p = e[0, head["head"]].double().numpy()
                entropy = -(p * np.log(np.where(p > 0, p, 1))).sum(-1)
                np.testing.assert_allclose(head["stats"]["row_entropy"], entropy, atol=1e-3)
                assert ("row_entropy_unscaled" in head["stats"]) is not (merged and stack != "encoder")
        rows[stack] = np.array([h["pattern"] for h in data["layers"][0]["heads"]], dtype=float).sum(-1)
        assert [p[0]["id"] for p in data["predictions"]] == out.logits[0].argmax(-1).tolist()
    # a row of the decoder and its row of the cross stack: each a softmax of its own, or one shared
    total = rows["decoder"] + rows["cross"]
    np.testing.assert_allclose(total, np.ones_like(total) * (1 if merged else 2), atol=1e-3)


def test_the_written_target_is_generates_and_the_stream_is_eagers(family):
    _, _, client, ref = family
    data = attention(client, text=SOURCE, include=[])
    source = data["source_ids"]
    with torch.no_grad():
        written = ref.generate(torch.tensor([source]), do_sample=False, max_new_tokens=WRITTEN)[0].tolist()
        expected = ref.generate(torch.tensor([source]), do_sample=False, max_new_tokens=NEW)[0].tolist()
    assert data["target_generated"] is True and data["target_ids"] == written
    r = client.post("/api/generate", json={"text": SOURCE, "max_new_tokens": NEW})
    assert r.status_code == 200, r.text
    lines = [json.loads(line) for line in r.text.splitlines()]
    steps = lines[:-1]
    target = steps[0]["target_ids"] + [s["token_id"] for s in steps]
    assert target == expected and lines[-1]["done"] is True
    out = run_eager(ref, source, target[:-1])  # each step's query: the token before the new one
    # a step reads its row from the cache, eager from one pass (other products' shapes, another order of the
    # float32 sums): on these peaked rows up to 2.3e-5 apart (T5Gemma 2's merged softmax), plus 5 decimals
    for t, step in enumerate(steps):
        for layer, (own, cross) in enumerate(zip(step["attention"], step["cross"], strict=True)):
            np.testing.assert_allclose(own, out.decoder_attentions[layer][0, :, t, : t + 1].numpy(), atol=4e-5)
            np.testing.assert_allclose(cross, out.cross_attentions[layer][0, :, t].numpy(), atol=4e-5)


def test_the_per_head_routes_answer_in_each_stack(family):
    """Head effects, the lens, knockout, selection and rollout on each family: 200 where the route is defined,
    a 422 naming ``stack`` where it is not (the lens and knockout on the encoder, rollout across two sides or on
    one block of a shared softmax)."""
    name, _, client, _ = family
    merged = name == "t5gemma2"
    body = {"text": SOURCE, "target": TARGET}
    refused = {
        ("/api/lens", "encoder"), ("/api/knockout", "encoder"), ("/api/rollout", "cross"),
        *([("/api/rollout", "decoder")] if merged else []),
    }
    routes = {
        "/api/head-effects": {"position": 3},
        "/api/lens": {},
        "/api/knockout": {"edges": [{"layer": 0, "query": [1, 3], "key": [0, 1]}]},
        "/api/selection": {"layer": 0, "head": 0, "queries": [1], "keys": [0]},
        "/api/rollout": {},
    }
    guesses = attention(client, **body, include=[], top_k=1)["predictions"]  # the decoder's, whichever the stack
    for stack in ("encoder", "decoder", "cross"):
        for route, extra in routes.items():
            r = client.post(route, json={**body, "stack": stack, **extra})
            if (route, stack) in refused:
                assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "stack"], (route, stack)
                continue
            assert r.status_code == 200, (route, stack, r.text)
            got = r.json()
            if route == "/api/head-effects":  # the decoder's guess at target position 3, its log-probability
                assert got["token_id"] == guesses[3][0]["id"]
                assert got["logprob"] == pytest.approx(np.log(guesses[3][0]["prob"]), abs=1e-4)
            if route == "/api/lens":  # after the last layer: the model's own guesses
                assert [row[0]["id"] for row in got["residuals"][-1]["top"]] == [g[0]["id"] for g in guesses]
