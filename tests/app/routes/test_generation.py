"""POST /api/generate: an NDJSON line per token as it is produced. Greedy equals transformers'
``generate(do_sample=False)`` token for token; every streamed attention row sums to 1; a full
context stops the generation; a client that hangs up stops it; a stream holds a concurrency slot."""

from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest
import torch

from tests.kit.app import served

pytest.importorskip("transformers")

from attnscope.app.compute import generation  # noqa: E402
from attnscope.app.main import create_app  # noqa: E402
from attnscope.app.settings import Settings  # noqa: E402

from tests.kit.hooks import PROMPT, hf_greedy, model_dirs  # noqa: E402, F401

NAMES = ["gpt2-export", "llama"]


@pytest.fixture(scope="module")
def clients(model_dirs):  # noqa: F811
    with served(model_dirs) as clients:
        yield clients


def stream(client, **body) -> list[dict]:
    with client.stream("POST", "/api/generate", json=body) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in r.iter_lines() if line]


def token_ids(client, text) -> list[int]:
    r = client.post("/api/attention", json={"text": text, "include": [], "top_k": 0})
    return r.json()["token_ids"]


@pytest.mark.parametrize("name", NAMES)
def test_greedy_stream_equals_transformers_generate(name, clients, model_dirs):  # noqa: F811
    c = clients[name]
    lines = stream(c, text=PROMPT, max_new_tokens=16)
    steps, done = lines[:-1], lines[-1]
    ids = token_ids(c, PROMPT)
    expected = hf_greedy(model_dirs[name], ids, 16)
    assert [s["token_id"] for s in steps] == expected
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert done["done"] is True and done["tokens"] == len(steps) and done["seed"] is None
    assert done["reason"] == ("eos" if len(expected) < 16 else "length")
    streamed = PROMPT + "".join(s["piece"] for s in steps)
    assert done["text"].startswith(streamed)  # and a character left incomplete at the end, if any
    assert done["text"][len(streamed) :] in ("", "\ufffd")
    info = c.get("/api/model").json()
    for s in steps:
        att = np.array(s["attention"])  # (L, nh, keys)
        assert att.shape == (info["n_layer"], info["n_head"], len(ids) + s["step"] - 1)
        assert np.abs(att.sum(-1) - 1).max() <= 1e-3
        assert s["top"][0]["prob"] >= s["top"][-1]["prob"] and len(s["top"]) == 5
        assert 0 < s["prob"] <= 1 and s["token"]


def test_each_streamed_row_is_the_full_pattern_row(clients):
    """Step k's row is the last row of the pattern of the prompt and tokens 1..k − 1, all at once."""
    from attnscope.model.ours.gpt import AttentionOptions

    c = clients["gpt2-export"]
    lines = stream(c, text=PROMPT, max_new_tokens=6)
    ids = token_ids(c, PROMPT)
    backend = c.app.state.attnscope.service.loaded.backend
    for k, line in enumerate(lines[:-1], start=1):
        seq = ids + [s["token_id"] for s in lines[: k - 1]]
        traces = []
        backend.run(seq, AttentionOptions(), traces, logits=False)
        full = torch.stack([t.pattern[0, :, -1] for t in traces]).numpy()
        assert np.abs(np.array(line["attention"]) - full).max() <= 2e-5
        # the page's "mean of all heads": the server's, over every layer and head
        assert np.abs(np.array(line["attention_mean"]) - full.mean((0, 1))).max() <= 2e-5


@pytest.mark.parametrize("name", NAMES)
def test_switched_off_heads_change_the_stream_as_the_hooked_model(name, clients, model_dirs):  # noqa: F811
    c = clients[name]
    heads = [(0, 1), (1, 0)]
    lines = stream(c, text=PROMPT, max_new_tokens=8, ablate=[{"layer": a, "head": b} for a, b in heads])
    expected = hf_greedy(model_dirs[name], token_ids(c, PROMPT), 8, heads)
    assert [s["token_id"] for s in lines[:-1]] == expected


def test_sampling_with_a_seed_repeats(clients):
    c = clients["llama"]
    body = dict(text=PROMPT, max_new_tokens=10, do_sample=True, temperature=1.5, top_k=50, seed=11)
    a, b = stream(c, **body), stream(c, **body)
    assert [x.get("token_id") for x in a] == [x.get("token_id") for x in b]
    assert a[-1]["seed"] == 11
    # the last line echoes every sampling setting used
    assert {k: a[-1][k] for k in ("do_sample", "temperature", "top_k", "top_p")} == {
        "do_sample": True,
        "temperature": 1.5,
        "top_k": 50,
        "top_p": None,
    }
    nucleus = stream(c, **{**body, "top_p": 0.5})
    assert nucleus[-1]["top_p"] == 0.5 and nucleus == stream(c, **{**body, "top_p": 0.5})
    drawn = stream(c, text=PROMPT, max_new_tokens=3, do_sample=True)
    assert isinstance(drawn[-1]["seed"], int)


def test_a_generation_that_fills_the_context_stops_with_reason_context(clients):
    c = clients["gpt2-export"]
    block = c.get("/api/model").json()["block_size"]
    text = "the"
    while (n := len(token_ids(c, text + " cat"))) <= block - 4:
        text += " cat"
    n = len(token_ids(c, text))
    assert block - 8 < n <= block - 4
    lines = stream(c, text=text, max_new_tokens=50)
    assert lines[-1]["reason"] == "context" and lines[-1]["tokens"] == block - n == len(lines) - 1


@pytest.mark.parametrize(
    "body, loc, limit_key, limit",
    [
        ({"max_new_tokens": 0}, ["body", "max_new_tokens"], "ge", 1),
        ({"max_new_tokens": 257}, ["body", "max_new_tokens"], "le", 256),
        ({"ablate": [{"layer": 7, "head": 0}]}, ["body", "ablate", 0, "layer"], "limit", 2),
        ({"ablate": [{"layer": 0, "head": 4}]}, ["body", "ablate", 0, "head"], "limit", 3),
        ({"temperature": 0}, ["body", "temperature"], "ge", 0.01),
        ({"top_k": 0}, ["body", "top_k"], "ge", 1),
        ({"top_p": 0}, ["body", "top_p"], "gt", 0),
        ({"top_p": 1.5}, ["body", "top_p"], "le", 1),
    ],
)
def test_bad_input_is_a_422_naming_the_field_and_the_limit(body, loc, limit_key, limit, clients):
    r = clients["gpt2-export"].post("/api/generate", json={"text": PROMPT, **body})
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["loc"] == loc and item["ctx"][limit_key] == limit


def test_a_text_longer_than_the_context_is_a_422(clients):
    r = clients["gpt2-export"].post("/api/generate", json={"text": "the cat " * 200})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "text"]


# ------------------------------------------------------------------ a real server


def slowed_steps(monkeypatch, seconds: float) -> dict:
    """Every generated token takes ``seconds`` longer; counts the tokens made."""
    real = generation.generate
    state = {"steps": 0}

    def slow(*args, **kwargs):
        for item in real(*args, **kwargs):
            time.sleep(seconds)
            state["steps"] += 1
            yield item

    monkeypatch.setattr(generation, "generate", slow)
    return state


def test_lines_arrive_as_tokens_are_made_and_a_hang_up_stops_the_work(monkeypatch, live_server):
    state = slowed_steps(monkeypatch, 0.15)
    with httpx.Client(base_url=live_server.url, timeout=30) as http:
        started = time.monotonic()
        with http.stream("POST", "/api/generate", json={"text": "The old dog", "max_new_tokens": 40}) as r:
            lines = r.iter_lines()
            first = json.loads(next(lines))
            first_at = time.monotonic() - started
            json.loads(next(lines))
            json.loads(next(lines))
        # the client is gone after three tokens
        assert first["step"] == 1 and first_at < 2.0  # the first token came before the 40th was made
        time.sleep(1.0)
        made = state["steps"]
        time.sleep(1.0)
        assert state["steps"] == made < 12
        # its concurrency slot is free again
        assert http.post("/api/attention", json={"text": "The old dog"}).status_code == 200


def test_a_stream_holds_a_concurrency_slot(monkeypatch, checkpoint_dir):
    from tests.kit.app import LiveServer

    app = create_app(Settings(checkpoint=checkpoint_dir, device="cpu", torch_threads=1, max_concurrency=1))
    slowed_steps(monkeypatch, 0.1)
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        finished = {}

        def generate():
            with http.stream("POST", "/api/generate", json={"text": "The old dog", "max_new_tokens": 10}) as r:
                finished["lines"] = [json.loads(x) for x in r.iter_lines() if x]
            finished["at"] = time.monotonic()

        t = threading.Thread(target=generate)
        t.start()
        time.sleep(0.4)  # the stream has its slot and is making tokens
        assert http.post("/api/attention", json={"text": "The old dog"}).status_code == 200
        attention_at = time.monotonic()
        t.join()
        assert finished["lines"][-1]["done"] and attention_at >= finished["at"] - 0.05
