"""Helpers for the service tests, shared by conftest.py and the test modules.

No test depends on particular trained weights: the checkpoint built here is a random model
(noise added so that heads differ and patterns are not uniform) with a tokenizer trained on
generated sentences, in a couple of seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote_to_bytes

import anyio
import httpx
import torch
import uvicorn
from attnscope.model.ours.checkpoint import save_checkpoint
from attnscope.model.ours.gpt import GPT, GPTConfig
from attnscope.model.ours.tokenizer import BPETokenizer
from fastapi import FastAPI

from tests.kit.textgen import english_like as sentences

BLOCK_SIZE = 64
N_LAYER = 2
N_HEAD = 2
N_EMBD = 32
HEAD_DIM = N_EMBD // N_HEAD


def build_checkpoint(path: Path, seed: int = 0) -> Path:
    """A random 2-layer, 2-head model (context 64) and a 300-token BPE, saved as a checkpoint."""
    texts = [" ".join(sentences(6, seed * 1000 + i)) for i in range(200)]
    tokenizer = BPETokenizer.train(texts, vocab_size=300)
    torch.manual_seed(seed)
    config = GPTConfig(
        block_size=BLOCK_SIZE, vocab_size=tokenizer.vocab_size, n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD
    )
    model = GPT(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # larger weights than GPT-2's init: peaky, head-specific patterns
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    training = {"step": 0, "history": [{"step": 0, "val_loss": 5.7}], "final": False, "note": "random test model"}
    return save_checkpoint(model, tokenizer, path, training=training)


def attention(client, **body) -> dict:
    """POST /api/attention, assert 200, return the JSON."""
    response = client.post("/api/attention", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """uvicorn serving an app in a thread of this process, on a free port."""

    def __init__(self, app: FastAPI) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def raw(self, request: bytes, timeout: float = 10) -> bytes:
        """Send raw bytes over a socket; return what the server sends back until it closes."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(request)
            chunks = []
            while True:
                try:
                    data = s.recv(65536)
                except (TimeoutError, ConnectionResetError):
                    break
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks)


def status_of(raw_response: bytes) -> int:
    """The status code of a raw HTTP/1.1 response."""
    return int(raw_response.split(b" ", 2)[1])


def asgi_get(app, raw_path: bytes) -> tuple[int, bytes]:
    """GET ``raw_path`` through the ASGI app exactly as given, with no client-side
    normalisation of ``..``; ``path`` is the percent-decoded form, as uvicorn passes it."""
    path = unquote_to_bytes(raw_path).decode("utf-8", "surrogateescape")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": raw_path,
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
    }
    status = 0
    body = []
    requested = False
    done = anyio.Event()

    async def receive():
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await done.wait()  # the client hangs up once the whole response is in
        return {"type": "http.disconnect"}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    async def call():
        await app(scope, receive, send)

    anyio.run(call)
    return status, b"".join(body)


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m attnscope ARGS`` from the repository, without the caller's ATTNSCOPE_CHECKPOINT."""
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    full_env.pop("ATTNSCOPE_CHECKPOINT", None)
    return subprocess.run(
        [sys.executable, "-m", "attnscope", *args],
        cwd=Path(__file__).resolve().parents[2],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.contextmanager
def serve_process(*args: str, env: dict | None = None) -> Iterator[subprocess.Popen]:
    """``python -m attnscope serve ARGS`` in a child process from the repository (unbuffered, its
    output piped as text, without the caller's ATTNSCOPE_CHECKPOINT). On the way out it is stopped
    as a user stops it, with Ctrl+C (SIGINT), and killed if it has not exited 20 s later."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("ATTNSCOPE_CHECKPOINT", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnscope", "serve", *args],
        cwd=Path(__file__).resolve().parents[2],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        stop_server(proc)


def stop_server(proc: subprocess.Popen) -> None:
    """Stop a served child as a user stops it, with Ctrl+C (SIGINT); killed if it has not exited 20 s later."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_ready(proc: subprocess.Popen, port: int, within: float) -> None:
    """Poll ``GET /readyz`` on ``port`` until it answers 200. Fails the test if the process exits
    first (with its stderr) or if ``within`` seconds pass."""
    deadline = time.monotonic() + within
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the server did not become ready"
        time.sleep(0.2)


@contextlib.contextmanager
def served(model_dirs: dict[str, Path]) -> Iterator[dict]:
    """A started TestClient per model directory (CPU, one torch thread), stopped on the way out."""
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(TestClient(create_app(Settings(checkpoint=path, device="cpu", torch_threads=1))))
            for name, path in model_dirs.items()
        }


def compare_models(client, **body):
    """POST /api/compare-models until its model_b is loaded (202 meanwhile); the last response."""
    deadline = time.monotonic() + 120
    while True:
        r = client.post("/api/compare-models", json=body)
        if r.status_code != 202:
            return r
        assert time.monotonic() < deadline, "model_b never loaded"
        time.sleep(0.1)
