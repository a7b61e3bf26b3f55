"""A real uvicorn server: the event loop stays free while the model computes, concurrency is
bounded, identical requests give identical bytes, and body limits hold on real sockets; with
``compile`` the statistics are compiled at startup."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from attnscope.app.compute import attention as compute
from attnscope.app.main import create_app
from attnscope.model import stats
from fastapi.testclient import TestClient
from torch._dynamo.utils import counters

from tests.kit.app import attention, status_of

TEXT = "The old dog follows the quiet river. The old dog"


def slowed(monkeypatch, seconds: float):
    """Make every attention computation take ``seconds`` longer (as a slow device would),
    and count how many run at once."""
    real = compute.attention_json
    state = {"active": 0, "max_active": 0, "entered": threading.Event()}
    lock = threading.Lock()

    def slow(*args, **kwargs):
        with lock:
            state["active"] += 1
            state["max_active"] = max(state["max_active"], state["active"])
        state["entered"].set()
        try:
            time.sleep(seconds)
            return real(*args, **kwargs)
        finally:
            with lock:
                state["active"] -= 1

    monkeypatch.setattr(compute, "attention_json", slow)
    return state


def test_healthz_answers_during_a_long_request(monkeypatch, live_server, http):
    state = slowed(monkeypatch, 3.0)
    result = {}

    def long_request():
        with httpx.Client(base_url=live_server.url, timeout=60) as c:
            result["response"] = c.post("/api/attention", json={"text": TEXT})

    worker = threading.Thread(target=long_request)
    worker.start()
    assert state["entered"].wait(10), "the long request never started computing"
    for _ in range(5):  # answered while the slow request still holds its worker thread
        assert http.get("/healthz").status_code == 200
        assert http.get("/readyz").status_code == 200
    assert worker.is_alive(), "the long request should still be running"
    worker.join(30)
    assert result["response"].status_code == 200
    assert result["response"].json()["timing_ms"] >= 3000


def test_concurrency_is_bounded(monkeypatch, live_server, settings):
    state = slowed(monkeypatch, 0.4)

    def one(_):
        with httpx.Client(base_url=live_server.url, timeout=60) as c:
            return c.post("/api/attention", json={"text": TEXT, "include": []})

    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(one, range(6)))
    assert [r.status_code for r in responses] == [200] * 6
    assert state["max_active"] == settings.max_concurrency == 2
    queued = [float(r.headers["server-timing"].split("queue;dur=")[1].split(",")[0]) for r in responses]
    assert max(queued) > 300  # some requests waited for a slot


def test_identical_bytes_under_concurrency(live_server):
    body = {"text": TEXT, "include": ["pattern", "attn_scores", "stats", "q"], "top_k": 8}

    def one(_):
        with httpx.Client(base_url=live_server.url, timeout=60) as c:
            r = c.post("/api/attention", json=body)
            assert r.status_code == 200
            return r.content.rsplit(b',"timing_ms":', 1)[0]

    with ThreadPoolExecutor(8) as pool:
        bodies = list(pool.map(one, range(8)))
    assert len(set(bodies)) == 1
    assert bodies[0] == one(None)  # and the same alone


def test_chunked_body_over_the_limit_on_a_real_socket(live_server):
    head = (
        b"POST /api/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    payload = b'{"text": "' + b"x" * 100_000 + b'"}'
    chunked = b"".join(
        b"%x\r\n%s\r\n" % (len(part), part) for part in (payload[i : i + 8192] for i in range(0, len(payload), 8192))
    )
    raw = live_server.raw(head + chunked + b"0\r\n\r\n")
    assert status_of(raw) == 413
    body = json.loads(raw.split(b"\r\n\r\n", 1)[1])
    assert body["detail"][0]["ctx"]["limit"] == 65536


def test_content_length_over_the_limit_answered_before_the_body(live_server):
    """A declared size past what the server drains (DRAIN_MAX) is refused without reading (or waiting
    for) the body; a smaller one is read and dropped first (tests/app/test_middleware.py)."""
    from attnscope.app.middleware import DRAIN_MAX

    head = (
        b"POST /api/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % (DRAIN_MAX + 1)
    )
    raw = live_server.raw(head, timeout=5)  # would time out if the server waited for the body
    assert status_of(raw) == 413


@pytest.mark.slow
def test_compile_makes_the_statistics_at_startup_and_they_equal_eager(settings, client):
    """``ATTNSCOPE_COMPILE``: the statistics' block passes compiled while the server starts, the
    page's request on texts of other lengths compiling nothing more, and its numbers eager's."""
    before = counters["stats"]["unique_graphs"]
    with TestClient(create_app(settings.model_copy(update={"compile": True}))) as fused:
        started = counters["stats"]["unique_graphs"]
        assert started > before  # compiled before the first request
        for text in (TEXT, TEXT + " crossed the old bridge again", "Short one."):
            body = dict(text=text, include=["stats"], focus={"layer": 1, "head": 1, "include": ["stats"]})
            got, expected = attention(fused, **body), attention(client, **body)
            assert got["tokens"] == expected["tokens"]
            for a, b in zip(got["layers"], expected["layers"], strict=True):
                for ha, hb in zip(a["heads"], b["heads"], strict=True):
                    for name, value in hb["stats"].items():
                        assert np.allclose(ha["stats"][name], value, rtol=1e-4, atol=1e-5, equal_nan=True), name
            for name, value in expected["focus"]["stats"].items():
                assert np.allclose(got["focus"]["stats"][name], value, rtol=1e-4, atol=1e-5, equal_nan=True), name
        assert counters["stats"]["unique_graphs"] == started


def test_a_compile_that_fails_stops_the_start_in_one_line(settings, monkeypatch):
    """No C++ compiler or Triton: ``--compile`` is refused at startup, in one line naming it."""

    def cannot(name):
        def compiled(*args):
            raise RuntimeError("InductorError: CppCompileError: C++ compile error\nlong traceback")

        return compiled

    monkeypatch.setattr(stats, "fused", cannot)
    app = create_app(settings.model_copy(update={"compile": True}))
    with pytest.raises(RuntimeError), TestClient(app):
        pass
    line = app.state.attnscope.startup_error
    assert line.startswith("attnscope: cannot start: --compile (ATTNSCOPE_COMPILE): torch.compile failed: ")
    assert "CppCompileError" in line and "\n" not in line


def test_workers_are_told_to_compile(monkeypatch, settings):
    """``serve --compile --workers 2``: each worker builds its settings from the environment, compile included."""
    import os

    import uvicorn
    from attnscope.app.cli import serve
    from attnscope.app.settings import Settings

    environ = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSCOPE_")}
    monkeypatch.setattr(os, "environ", environ)  # what run() sets for the workers stays in this test
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    serve.run(settings.model_copy(update={"compile": True}), workers=2)
    assert Settings().compile is True
