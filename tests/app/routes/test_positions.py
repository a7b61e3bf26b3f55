"""Every route that takes a query, key or position index: the last token is accepted, one past it is
a 422 naming the field, and every route states the same inclusive range, 0 to n - 1, in words and in
``ctx.limit``."""

from __future__ import annotations

import re

import pytest

TEXT = "The cat sat on the mat. The cat sat on the"
ONE_HEAD = {"text": TEXT, "layer": 0, "head": 0}
PATCH = {"clean": TEXT, "corrupt": TEXT.replace("cat", "dog"), "token_id": 1, "foil_id": 2}
KNOCK = {"text": TEXT, "edges": [{"layer": 0, "query": 1, "key": 0}]}

# (url, the body with the index v in it, where the index is)
ROUTES = [
    ("/api/attention", lambda v: {"text": TEXT, "query_row": v}, ["query_row"]),
    ("/api/neuron", lambda v: {**ONE_HEAD, "query": v, "key": 0}, ["query"]),
    ("/api/neuron", lambda v: {**ONE_HEAD, "key": v}, ["key"]),
    ("/api/selection", lambda v: {**ONE_HEAD, "queries": [0, v]}, ["queries", 1]),
    ("/api/selection", lambda v: {**ONE_HEAD, "keys": [v]}, ["keys", 0]),
    ("/api/rollout", lambda v: {"text": TEXT, "position": v}, ["position"]),
    ("/api/qk-attribution", lambda v: {**ONE_HEAD, "query": v, "key": 0}, ["query"]),
    ("/api/qk-attribution", lambda v: {**ONE_HEAD, "query": 0, "key": v}, ["key"]),
    ("/api/attribution", lambda v: {"text": TEXT, "position": v}, ["position"]),
    ("/api/head-effects", lambda v: {"text": TEXT, "position": v}, ["position"]),
    ("/api/patching", lambda v: {**PATCH, "position": v}, ["position"]),
    ("/api/knockout", lambda v: {**KNOCK, "position": v}, ["position"]),
    ("/api/knockout", lambda v: {"text": TEXT, "edges": [{"layer": 0, "query": v, "key": 0}]}, ["edges", 0, "query"]),
    ("/api/knockout", lambda v: {"text": TEXT, "edges": [{"layer": 0, "query": 1, "key": v}]}, ["edges", 0, "key"]),
]


@pytest.fixture(scope="module")
def n_tokens(client) -> int:
    return len(client.app.state.attnscope.service.loaded.tokenizer.encode_ids(TEXT))


@pytest.mark.parametrize(("url", "body", "loc"), ROUTES, ids=[f"{u}:{'.'.join(map(str, loc))}" for u, _, loc in ROUTES])
def test_every_route_states_the_same_inclusive_range(client, n_tokens, url, body, loc):
    n = n_tokens
    assert client.post(url, json=body(n - 1)).status_code == 200  # the last token is a position
    r = client.post(url, json=body(n))
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", *loc] and error["type"] == "index_out_of_range"
    assert error["ctx"]["limit"] == n - 1 and error["ctx"]["value"] == n
    ranges = re.findall(r"\((\d+) to (\d+)\)", error["msg"])
    assert ranges == [("0", str(n - 1))], error["msg"]  # the range said is the one accepted
    assert f"{n} tokens" in error["msg"]


def test_a_knockout_range_states_its_bounds(client, n_tokens):
    n = n_tokens
    edge = {"layer": 0, "query": n - 1, "key": [1, n]}  # half-open: [1, n] is every key but the first
    assert client.post("/api/knockout", json={"text": TEXT, "edges": [edge]}).status_code == 200
    for bad in ([0, n + 1], [3, 3]):
        r = client.post("/api/knockout", json={"text": TEXT, "edges": [{**edge, "key": bad}]})
        assert r.status_code == 422, r.text
        (error,) = r.json()["detail"]
        assert error["loc"] == ["body", "edges", 0, "key"] and error["ctx"]["limit"] == n - 1
        assert f"0 to {n - 1}" in error["msg"] and f"a + 1 to {n}" in error["msg"]
