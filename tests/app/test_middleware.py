"""The body size limit as a plain client meets it: Python's ``http.client`` sends a whole body before it
reads a byte of the answer, so the server must read (and drop) what was sent before it answers 413 and
closes; otherwise closing with unread bytes resets the connection and the client sees no answer."""

from __future__ import annotations

import http.client
import json

import pytest
from attnscope.app.middleware import DRAIN_MAX

LIMIT = 65536


def post_whole(port: int, body: bytes, headers: dict | None = None) -> tuple[int, dict, dict]:
    """POST ``body`` with http.client; the answer's status, headers and JSON."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Content-Type": "application/json", **(headers or {})}
        conn.request("POST", "/api/attention", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        conn.close()


def assert_413(status: int, headers: dict, answer: dict) -> None:
    assert status == 413, answer
    assert headers["connection"] == "close"
    (item,) = answer["detail"]
    assert item["loc"] == ["body"] and item["ctx"]["limit"] == LIMIT


SIZES = {"limit+1": LIMIT + 1, "70 kB": 70_000, "1 MiB": 1 << 20, "drain max": DRAIN_MAX}


@pytest.mark.parametrize("size", list(SIZES.values()), ids=list(SIZES))
def test_a_whole_body_over_the_limit_is_answered_413(live_server, size):
    body = b'{"text": "' + b"x" * (size - 12) + b'"}'
    assert len(body) == size
    for _ in range(5):  # a reset came often, not always
        assert_413(*post_whole(live_server.port, body))
    assert post_whole(live_server.port, b'{"text": "x", "top_k": 0}')[0] == 200  # and it keeps serving


def test_a_chunked_body_over_the_limit_is_answered_413(live_server):
    """No Content-Length: the body runs over while it is read; the rest is read and dropped too."""
    chunks = [b'{"text": "', *[b"x" * 65536] * 100, b'"}']
    for _ in range(3):
        assert_413(*post_whole(live_server.port, iter(chunks)))  # an iterable: http.client sends it chunked


def test_a_client_that_waits_for_100_continue_is_answered_before_it_sends(live_server):
    """Reading the body would tell such a client to send it: the 413 comes from Content-Length alone."""
    conn = http.client.HTTPConnection("127.0.0.1", live_server.port, timeout=10)
    try:
        conn.putrequest("POST", "/api/attention")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(LIMIT + 10))
        conn.putheader("Expect", "100-continue")
        conn.endheaders()
        response = conn.getresponse()  # nothing of the body sent
        assert_413(response.status, dict(response.getheaders()), json.loads(response.read()))
    finally:
        conn.close()
