"""Bad input, case by case: always a 4xx JSON ``{"detail": [...]}`` naming the field (``loc``)
and, where there is one, the limit; never a 500 or a traceback."""

from __future__ import annotations

import json

import pytest

LONG_TOKENS = "the cat " * 40  # about 80 tokens, 320 characters: over the test model's 64-token context

# (id, url, body, expected status, loc after "body", the limit the detail must mention or None)
# body: a JSON-able object, or bytes sent as they are with Content-Type application/json
CASES = [
    # text
    ("text empty", "/api/attention", {"text": ""}, 422, ["text"], 1),
    ("text whitespace only", "/api/attention", {"text": " \n\t\u3000 "}, 422, ["text"], None),
    ("text over the character limit", "/api/attention", {"text": "x" * 16001}, 422, ["text"], 16000),
    ("text over the context", "/api/attention", {"text": LONG_TOKENS}, 422, ["text"], 64),
    ("text missing", "/api/attention", {"include": ["pattern"]}, 422, ["text"], None),
    ("text a number", "/api/attention", {"text": 123}, 422, ["text"], None),
    ("text null", "/api/attention", {"text": None}, 422, ["text"], None),
    ("text a list", "/api/attention", {"text": ["a"]}, 422, ["text"], None),
    ("text lone surrogate", "/api/attention", b'{"text": "ab\\ud800cd"}', 422, ["text"], None),
    # include
    (
        "include unknown name",
        "/api/attention",
        {"text": "x", "include": ["pattern", "attention"]},
        422,
        ["include", 1],
        "pattern",
    ),
    ("include a string", "/api/attention", {"text": "x", "include": "pattern"}, 422, ["include"], None),
    # layers and heads
    ("layer out of range", "/api/attention", {"text": "x", "layers": [0, 2]}, 422, ["layers", 1], 1),
    ("layer negative", "/api/attention", {"text": "x", "layers": [-1]}, 422, ["layers", 0], 0),
    ("layer a string", "/api/attention", {"text": "x", "layers": ["0"]}, 422, ["layers", 0], None),
    ("layers not a list", "/api/attention", {"text": "x", "layers": 0}, 422, ["layers"], None),
    ("layers too many", "/api/attention", {"text": "x", "layers": [0] * 65}, 422, ["layers"], 64),
    ("head out of range", "/api/attention", {"text": "x", "heads": [2]}, 422, ["heads", 0], 1),
    ("head negative", "/api/attention", {"text": "x", "heads": [-3]}, 422, ["heads", 0], 0),
    ("head a float", "/api/attention", {"text": "x", "heads": [1.5]}, 422, ["heads", 0], None),
    # scale and temperature
    ("scale zero", "/api/attention", {"text": "x", "scale": 0}, 422, ["scale"], "0.001"),
    ("scale negative", "/api/attention", {"text": "x", "scale": -2.0}, 422, ["scale"], "0.001"),
    ("scale too large", "/api/attention", {"text": "x", "scale": 1e9}, 422, ["scale"], "10000"),
    ("scale unknown name", "/api/attention", {"text": "x", "scale": "sqrt"}, 422, ["scale"], "sqrt_dk"),
    ("scale a bool", "/api/attention", {"text": "x", "scale": True}, 422, ["scale"], None),
    ("temperature zero", "/api/attention", {"text": "x", "temperature": 0}, 422, ["temperature"], 0.01),
    ("temperature negative", "/api/attention", {"text": "x", "temperature": -1.0}, 422, ["temperature"], 0.01),
    ("temperature a string", "/api/attention", {"text": "x", "temperature": "1"}, 422, ["temperature"], None),
    # top_k
    ("top_k negative", "/api/attention", {"text": "x", "top_k": -1}, 422, ["top_k"], 0),
    ("top_k over 50", "/api/attention", {"text": "x", "top_k": 51}, 422, ["top_k"], 50),
    ("top_k a float", "/api/attention", {"text": "x", "top_k": 2.5}, 422, ["top_k"], None),
    ("top_k a string", "/api/attention", {"text": "x", "top_k": "5"}, 422, ["top_k"], None),
    # causal
    ("causal a string", "/api/attention", {"text": "x", "causal": "yes"}, 422, ["causal"], None),
    ("causal a number", "/api/attention", {"text": "x", "causal": 1}, 422, ["causal"], None),
    # the body as a whole
    ("unknown field", "/api/attention", {"text": "x", "include_all": True}, 422, ["include_all"], None),
    ("body a list", "/api/attention", [{"text": "x"}], 422, [], None),
    ("body a string", "/api/attention", "x", 422, [], None),
    ("body empty", "/api/attention", b"", 422, [], None),
    ("invalid JSON", "/api/attention", b'{"text": "x"', 422, [], None),
    ("JSON with NaN", "/api/attention", b'{"text": "x", "temperature": NaN}', 422, [], "NaN"),
    ("JSON with Infinity", "/api/attention", b'{"text": "x", "scale": Infinity}', 422, [], "Infinity"),
    ("body not UTF-8", "/api/attention", b'{"text": "caf\xe9"}', 422, [], "UTF-8"),
    ("JSON nested too deeply", "/api/attention", b"[" * 20_000 + b"]" * 20_000, 422, [], "nested"),
    # lessons
    ("bag-of-words T zero", "/api/lessons/bag-of-words", {"T": 0}, 422, ["T"], 1),
    ("bag-of-words T too big", "/api/lessons/bag-of-words", {"T": 65}, 422, ["T"], 64),
    ("bag-of-words C too big", "/api/lessons/bag-of-words", {"C": 17}, 422, ["C"], 16),
    ("bag-of-words seed negative", "/api/lessons/bag-of-words", {"seed": -1}, 422, ["seed"], 0),
    ("bag-of-words seed too big", "/api/lessons/bag-of-words", {"seed": 2**63}, 422, ["seed"], 2**63 - 1),
    ("softmax logits empty", "/api/lessons/softmax-scaling", {"logits": []}, 422, ["logits"], 1),
    ("softmax logits too many", "/api/lessons/softmax-scaling", {"logits": [0.0] * 65}, 422, ["logits"], 64),
    ("softmax logit a string", "/api/lessons/softmax-scaling", {"logits": [0.1, "a"]}, 422, ["logits", 1], None),
    ("softmax logit too large", "/api/lessons/softmax-scaling", {"logits": [1e300]}, 422, ["logits", 0], "1000000"),
    ("softmax factor zero", "/api/lessons/softmax-scaling", {"factor": 0}, 422, ["factor"], 0),
    ("softmax factor negative", "/api/lessons/softmax-scaling", {"factor": -8}, 422, ["factor"], 0),
    ("softmax factor too large", "/api/lessons/softmax-scaling", {"factor": 1e7}, 422, ["factor"], "1000000"),
    ("variance head_size zero", "/api/lessons/variance", {"head_size": 0}, 422, ["head_size"], 1),
    ("variance head_size too big", "/api/lessons/variance", {"head_size": 513}, 422, ["head_size"], 512),
    ("variance samples too big", "/api/lessons/variance", {"samples": 257}, 422, ["samples"], 256),
    ("variance T a string", "/api/lessons/variance", {"T": "8"}, 422, ["T"], None),
]


def post(client, url, body, headers=None):
    if isinstance(body, bytes):
        return client.post(url, content=body, headers={"Content-Type": "application/json", **(headers or {})})
    return client.post(url, json=body, headers=headers)


def assert_error(response, status: int, loc: list, limit) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert b"Traceback" not in response.content
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail, detail
    wanted = ["body", *loc]
    matching = [item for item in detail if item["loc"][: len(wanted)] == wanted]
    assert matching, f"no detail item at {wanted}: {detail}"
    if limit is not None:
        text = " ".join(item["msg"] + " " + json.dumps(item.get("ctx", {})) for item in matching)
        assert str(limit) in text, f"the limit {limit} is not named: {matching}"
    return detail


@pytest.mark.parametrize(("url", "body", "status", "loc", "limit"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(client, url, body, status, loc, limit):
    assert_error(post(client, url, body), status, loc, limit)


def test_too_many_tokens_names_the_limit_and_the_count(client):
    detail = assert_error(post(client, "/api/attention", {"text": LONG_TOKENS}), 422, ["text"], 64)
    enc = client.app.state.attnscope.service.loaded.tokenizer.encode(LONG_TOKENS)
    n = len(enc.ids)
    # and where the text's first 64 tokens end, so that a client can offer the part that fits
    assert detail[0]["ctx"] == {"limit": 64, "count": n, "fits_chars": enc.offsets[63][1]}
    assert f"{n} tokens" in detail[0]["msg"] and "64" in detail[0]["msg"]


def test_body_over_the_limit_by_content_length(client):
    body = json.dumps({"text": "x" * 70_000}).encode()
    assert_error(post(client, "/api/attention", body), 413, [], 65536)


def test_body_over_the_limit_chunked(client):
    """No Content-Length: the limit is enforced on the bytes as they arrive."""
    sent = []

    def chunks():
        yield b'{"text": "'
        for _ in range(100):
            sent.append(1)
            yield b"x" * 1024
        yield b'"}'

    response = client.post("/api/attention", content=chunks(), headers={"Content-Type": "application/json"})
    assert_error(response, 413, [], 65536)


def test_body_just_under_the_limit_is_read(client):
    """A large but allowed body reaches validation (and fails there, on the text limit)."""
    body = json.dumps({"text": "y" * 60_000}).encode()
    assert len(body) < 65536
    assert_error(post(client, "/api/attention", body), 422, ["text"], 16000)


def test_wrong_content_type(client):
    r = client.post("/api/attention", content=b'{"text": "x"}', headers={"Content-Type": "text/plain"})
    assert_error(r, 422, [], None)


def test_errors_never_echo_the_input(client):
    secret = "do-not-echo-" * 400
    r = post(client, "/api/attention", {"text": secret})
    assert r.status_code == 422
    assert b"do-not-echo" not in r.content


def test_unexpected_errors_are_a_json_500_without_traceback(settings, monkeypatch, caplog):
    """A bug in the service: logged with its traceback on the server, a plain 500 for the client."""
    from attnscope.app.compute import attention as compute
    from attnscope.app.main import create_app
    from fastapi.testclient import TestClient

    def broken(*args, **kwargs):
        raise RuntimeError("boom in the service")

    monkeypatch.setattr(compute, "attention_json", broken)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.post("/api/attention", json={"text": "x"})
    assert r.status_code == 500
    assert r.json() == {"detail": "internal server error"}
    assert b"boom" not in r.content and b"Traceback" not in r.content
    assert any("boom in the service" in str(rec.exc_info[1]) for rec in caplog.records if rec.exc_info)


def test_a_lesson_argument_error_is_422_naming_the_argument(settings, monkeypatch):
    from attnscope.app.compute import lessons
    from attnscope.app.main import create_app
    from attnscope.model.lessons import LessonArgumentError
    from fastapi.testclient import TestClient

    def refuses(*args, **kwargs):
        raise LessonArgumentError("T", "T must be from 1 to 64, got 0")

    monkeypatch.setattr(lessons, "lesson_bag_of_words", refuses)
    with TestClient(create_app(settings)) as c:
        r = c.post("/api/lessons/bag-of-words", json={})
    assert r.status_code == 422
    assert r.json()["detail"][0]["msg"] == "T must be from 1 to 64, got 0"
    assert r.json()["detail"][0]["loc"] == ["body", "T"]


def test_any_other_value_error_is_our_bug_not_the_clients(settings, monkeypatch):
    from attnscope.app.compute import lessons
    from attnscope.app.main import create_app
    from fastapi.testclient import TestClient

    def broken(*args, **kwargs):
        raise ValueError("shapes do not match")

    monkeypatch.setattr(lessons, "lesson_bag_of_words", broken)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.post("/api/lessons/bag-of-words", json={})
        assert r.status_code == 500 and r.json() == {"detail": "internal server error"}
        assert c.get("/healthz").status_code == 200  # and it keeps serving


# Empty lists, alone and together, with and without a thumbnail and a focus (pooled, a region or in full):
# never a 500. An empty list selects nothing, and a thumbnail of nothing is no thumbnail at all.
EMPTY_LISTS = [("layers",), ("heads",), ("include",), ("ablate",), ("layers", "heads", "include", "ablate")]
FOCUS_KINDS = {
    "no focus": None,
    "focus in full": {"layer": 1, "head": 0},
    "focus pooled": {"layer": 1, "head": 0, "thumbnail": 4},
    "focus region, no fields": {"layer": 0, "head": 1, "region": [0, 2, 0, 2], "include": []},
}


@pytest.mark.parametrize("encoding", ["json", "b64"])
@pytest.mark.parametrize("focus", list(FOCUS_KINDS.values()), ids=list(FOCUS_KINDS))
@pytest.mark.parametrize("thumbnail", [None, 4], ids=["no thumbnail", "thumbnail 4"])
@pytest.mark.parametrize("empty", EMPTY_LISTS, ids=["+".join(names) for names in EMPTY_LISTS])
def test_empty_lists_select_nothing(client, empty, thumbnail, focus, encoding):
    body = {"text": "hello there", "encoding": encoding, **{name: [] for name in empty}}
    if focus is not None:
        body["focus"] = focus
    asked = {**body, "thumbnail": thumbnail} if thumbnail else body
    r = post(client, "/api/attention", asked)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["ablate"] == []
    assert ("focus" in answer) == (focus is not None)
    if "layers" in empty:
        assert answer["layers"] == []
    selected = [head for layer in answer["layers"] for head in layer["heads"]]
    if "heads" in empty:
        assert selected == []
    if "include" in empty:  # no fields: a head is its number, and its thumbnail where one was asked for
        assert all(set(head) <= {"head", "thumbnail"} for head in selected)
    if not selected:  # no head to pool: the same answer as without `thumbnail`
        plain = post(client, "/api/attention", body)
        assert plain.status_code == 200, plain.text
        assert {**answer, "timing_ms": None} == {**plain.json(), "timing_ms": None}


@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_a_selection_of_no_tokens_combines_nothing(client, reduce):
    body = {"text": "hello there", "layer": 0, "head": 0, "queries": [], "keys": [], "reduce": reduce, "ablate": []}
    r = post(client, "/api/selection", body)
    assert r.status_code == 200, r.text
    assert r.json()["from_queries"] is None and r.json()["to_keys"] is None


@pytest.mark.parametrize(
    ("url", "model", "body"),
    [
        ("/api/attention", "attention.AttentionRequest", {"text": 3, "top_k": "x", "scale": -1}),
        ("/api/patching", "patching.PatchingRequest", {"clean": "  ", "corrupt": 5, "what": "all"}),
        ("/api/compare-texts", "two_texts.TwoTextsRequest", {"text": "a", "text_b": "", "layer": -1, "head": 0}),
    ],
)
def test_a_body_read_by_its_subjects_dependencies_lists_each_error_once(client, url, model, body):
    """The route and each subject dependency validate the body (app/deps.py ``subject_dep``): the 422 lists
    the schema's own errors, each once, in the schema's order."""
    import importlib

    from pydantic import ValidationError

    module, name = model.split(".")
    schema = getattr(importlib.import_module(f"attnscope.app.schemas.{module}"), name)
    with pytest.raises(ValidationError) as own:
        schema.model_validate(body)
    r = client.post(url, json=body)
    assert r.status_code == 422
    got = [(tuple(item["loc"][1:]), item["type"]) for item in r.json()["detail"]]
    assert got == [(tuple(e["loc"]), e["type"]) for e in own.value.errors()]
