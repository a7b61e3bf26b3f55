"""A conversation as a request's subject (app/subject.py): the ids are the chat template's, the spans
hold each message, ``span_mass`` is the eager pattern's last row summed per message, every route
answers on ``messages`` as it answers on a text of the same ids, and bad conversations are a 422
naming ``messages``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from tests.kit.app import served
from tests.kit.chat import CONVERSATION, build_chat, hf_ids

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

CHATS = [
    CONVERSATION,
    [{"role": "user", "content": "Hello there."}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "Empty system prompt."}],
    [*CONVERSATION[:3]],  # ends with the assistant: no generation prompt by default
]


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat(tmp_path_factory.mktemp("chat") / "tiny-chat")


@pytest.fixture(scope="module")
def chat(chat_dir):
    with served({"chat": chat_dir}) as clients:
        yield clients["chat"]


def ask(client: TestClient, url: str, body: dict) -> dict:
    r = client.post(url, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_model_says_it_takes_messages(chat, client):
    info = chat.get("/api/model").json()
    assert info["chat"] is True and info["subject"] == ["text", "messages"]
    ours = client.get("/api/model").json()
    assert ours["chat"] is False and ours["subject"] == ["text"]


@pytest.mark.parametrize("messages", CHATS)
def test_ids_are_the_templates_and_spans_hold_each_message(chat, chat_dir, messages):
    got = ask(chat, "/api/attention", {"messages": messages, "include": [], "top_k": 0})
    generation_prompt = messages[-1]["role"] != "assistant"
    assert got["token_ids"] == hf_ids(chat_dir, messages, generation_prompt)
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(chat_dir / "tokenizer.json"))
    inside = set()
    for i, (span, message) in enumerate(zip(got["spans"], messages)):
        assert (span["message"], span["role"]) == (i, message["role"])
        ids = got["token_ids"][span["start"] : span["end"]]
        assert tk.decode(ids, skip_special_tokens=False).strip() == message["content"].strip()
        inside |= set(range(span["start"], span["end"]))
    kinds = got["token_kinds"]
    assert [k == "text" for k in kinds] == [t in inside for t in range(len(kinds))]
    assert set(kinds) <= {"text", "marker"}


def test_add_generation_prompt_is_the_templates(chat, chat_dir):
    for flag in (True, False):
        body = {"messages": CONVERSATION, "add_generation_prompt": flag, "include": [], "top_k": 0}
        assert ask(chat, "/api/attention", body)["token_ids"] == hf_ids(chat_dir, CONVERSATION, flag)


def test_span_mass_is_the_eager_last_row_per_message(chat, chat_dir):
    from transformers import AutoModelForCausalLM

    got = ask(chat, "/api/attention", {"messages": CONVERSATION, "include": [], "top_k": 0})
    model = AutoModelForCausalLM.from_pretrained(chat_dir, attn_implementation="eager")
    with torch.no_grad():
        out = model(torch.tensor([got["token_ids"]]), output_attentions=True)
    for layer, attentions in enumerate(out.attentions):
        last = attentions[0, :, -1].double()  # (nh, T)
        want = torch.stack([last[:, s["start"] : s["end"]].sum(-1) for s in got["spans"]], -1)
        np.testing.assert_allclose(got["span_mass"][layer], want.numpy(), rtol=1e-4, atol=1e-6)
    total = np.asarray(got["span_mass"]).sum(-1)
    assert (total <= 1 + 1e-5).all()  # the markup takes the rest


def text_of_same_ids(chat: TestClient, messages: list[dict]) -> tuple[str, list[int]]:
    """A text that the model reads as the same ids as ``messages``: the rendered template (the model adds no
    BOS, and its markup is one special token)."""
    ids = ask(chat, "/api/attention", {"messages": messages, "include": [], "top_k": 0})["token_ids"]
    text = chat.app.state.attnscope.service.loaded.tokenizer.tk.decode(ids, skip_special_tokens=False)
    return text, ids


ROUTES = {
    "/api/attention": {"layers": [1], "heads": [0, 2], "include": ["pattern", "attn_scores_raw", "stats"]},
    "/api/rollout": {},
    "/api/head-effects": {},
    "/api/lens": {"top_k": 3},
    "/api/attribution": {},
    "/api/knockout": {"edges": [{"layer": 0, "head": 1, "query": 20, "key": 3}]},
    "/api/qk-attribution": {"layer": 1, "head": 2, "query": 20, "key": 3},
    "/api/neuron": {"layer": 1, "head": 2},
    "/api/selection": {"layer": 1, "head": 2, "queries": [20], "keys": [3]},
}
ADDED = {"spans", "token_kinds", "span_mass", "offsets", "timing_ms"}


@pytest.mark.parametrize("url", ROUTES)
def test_every_route_answers_on_messages_as_on_the_same_ids(chat, url):
    text, ids = text_of_same_ids(chat, CONVERSATION)
    as_text = ask(chat, "/api/attention", {"text": text, "include": [], "top_k": 0})
    assert as_text["token_ids"] == ids  # the same ids both ways: the answers must agree
    a = ask(chat, url, {"text": text, **ROUTES[url]})
    b = ask(chat, url, {"messages": CONVERSATION, **ROUTES[url]})
    assert {k: v for k, v in a.items() if k not in ADDED} == {k: v for k, v in b.items() if k not in ADDED}
    if "tokens" in b:
        assert b["spans"] and len(b["token_kinds"]) == len(b["tokens"])


def test_generation_and_patching_take_messages(chat):
    lines = chat.post("/api/generate", json={"messages": CONVERSATION, "max_new_tokens": 2}).text.splitlines()
    import json

    first = json.loads(lines[0])
    assert first["spans"][-1]["role"] == "user"
    other = [*CONVERSATION[:3], {"role": "user", "content": "And the earth?"}]
    got = ask(chat, "/api/patching", {"clean_messages": CONVERSATION, "corrupt_messages": other})
    assert len(got["tokens"]) == len(got["corrupt_tokens"]) and got["spans"][3]["role"] == "user"


BAD = {
    "empty list": ({"messages": []}, ["body", "messages"]),
    "unknown role": ({"messages": [{"role": "tool", "content": "x"}]}, ["body", "messages", 0, "role"]),
    "content not a string": ({"messages": [{"role": "user", "content": 3}]}, ["body", "messages", 0, "content"]),
    "text and messages": ({"text": "hi", "messages": CONVERSATION}, ["body", "text"]),
    "neither": ({"include": []}, ["body", "text"]),
    "an order the template refuses": ({"messages": [{"role": "assistant", "content": "x"}]}, ["body", "messages"]),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_conversations_are_refused_naming_messages(chat, case):
    body, loc = BAD[case]
    r = chat.post("/api/attention", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == loc and "messages" in ".".join(map(str, loc)) + detail["msg"]


def test_a_model_without_a_template_refuses_messages(client):
    r = client.post("/api/attention", json={"messages": CONVERSATION})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "messages"] and "chat template" in detail["msg"]
    assert client.post("/api/attention", json={"text": "Still fine.", "include": []}).status_code == 200


def test_what_a_conversation_adds_is_in_the_field_table(chat, client):
    """What an answer to ``messages`` holds that one to a text of our model does not (its spans, each message's
    share, the markup's kinds) is a row of `/api/model` `fields`, at the answer, with how it is drawn."""
    fields = {f["name"]: f for f in chat.get("/api/model").json()["fields"]}
    plain = ask(client, "/api/attention", {"text": "The cat sat.", "top_k": 0})
    answer = ask(chat, "/api/attention", {"messages": CONVERSATION, "top_k": 0})
    extra = answer.keys() - plain.keys()
    assert {"spans", "span_mass"} <= extra
    for name in extra:
        assert fields[name]["at"] == "answer" and fields[name]["sits"] in ("band", "head"), name
    roles = set(fields["spans"]["values"])
    assert {s["role"] for s in answer["spans"]} <= roles
