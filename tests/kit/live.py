"""A live attnscope server and a headless Debian chromium, shared by the browser tests,
``scripts/screenshots.py`` and ``bench/browser_bench.py``.

The server is the real app, started as ``python -m attnscope serve`` in a child process. Its
checkpoint is, in order: ``$ATTNSCOPE_CHECKPOINT``, the shipped model, the training run's
latest checkpoint, else a random model of the shipped shape built on the spot (so the
browser tests never depend on trained weights).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHIPPED = ROOT / "model" / "ours" / "checkpoints" / "attnscope-small"
TRAINING_RUN = ROOT / "runs" / "small" / "checkpoint"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _is_checkpoint(path: Path) -> bool:
    return (path / "config.json").is_file()


def build_random_checkpoint(path: Path) -> Path:
    """A random model of the shipped shape (4 layers × 4 heads, d_k 32, context 256)."""
    sys.path.insert(0, str(ROOT))
    import torch
    from attnscope.model.ours.checkpoint import save_checkpoint
    from attnscope.model.ours.gpt import GPT, GPTConfig
    from attnscope.model.ours.tokenizer import BPETokenizer

    rng = random.Random(0)
    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "window", "opens", "river", "garden"]
    words += ["quietly", "because", "warm", "cold", "and", "or", "but"]
    texts = [" ".join(rng.choice(words) for _ in range(40)) + "." for _ in range(300)]
    tokenizer = BPETokenizer.train(texts, vocab_size=400)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, name="attnscope-random"))
    with torch.no_grad():  # larger weights than the init, so heads differ visibly
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return save_checkpoint(model, tokenizer, path, training={"note": "random model for browser tests"})


@contextmanager
def checkpoint_dir():
    """The checkpoint the server should load, and whether it is a stand-in random model."""
    env = os.environ.get("ATTNSCOPE_CHECKPOINT")
    if env:
        yield Path(env), False
        return
    for candidate in (SHIPPED, TRAINING_RUN):
        if _is_checkpoint(candidate):
            yield candidate, False
            return
    tmp = Path(tempfile.mkdtemp(prefix="attnscope-ckpt-"))
    try:
        yield build_random_checkpoint(tmp / "random"), True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class LiveServer:
    """``python -m attnscope serve`` on a free local port, in a child process."""

    def __init__(
        self,
        checkpoint: Path,
        port: int | None = None,
        threads: int = 1,
        log_path: Path | None = None,
        env: dict | None = None,
    ):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.checkpoint = checkpoint
        extra_env = env or {}
        env = dict(os.environ)
        env.update(
            ATTNSCOPE_CHECKPOINT=str(checkpoint),
            ATTNSCOPE_DEVICE=env.get("ATTNSCOPE_DEVICE", "cpu"),
            ATTNSCOPE_TORCH_THREADS=str(threads),
            PYTHONUNBUFFERED="1",
        )
        env.update(extra_env)
        self.log_path = log_path or Path(tempfile.mkstemp(prefix="attnscope-server-", suffix=".log")[1])
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        # the product's own entry point: `python -m attnscope serve` (= `attnscope serve`)
        cmd = [
            sys.executable,
            "-m",
            "attnscope",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--checkpoint",
            str(checkpoint),
            "--device",
            env["ATTNSCOPE_DEVICE"],
        ]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the attnscope server exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the attnscope server was not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


@contextmanager
def live_server(threads: int = 1):
    """Start the real app on a free port, wait until the model is loaded, stop it afterwards."""
    with checkpoint_dir() as (ckpt, random_model):
        server = LiveServer(ckpt, threads=threads)
        try:
            server.wait_ready()
            server.random_model = random_model
            yield server
        finally:
            server.stop()


@contextmanager
def chromium():
    """Playwright's chromium driver on Debian's /usr/bin/chromium (never a downloaded one)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def wait_settled(page, timeout: float = 60_000) -> None:
    """Wait until the explorer shows the current text's answers (or an error) with nothing pending."""
    page.wait_for_function(
        "() => window.attnscope !== undefined && window.attnscope.settled", timeout=timeout, polling=50
    )


# A paragraph long enough for the full context once repeated; plain modern English.
FILLER = (
    "A package manager keeps track of every file that a program installs, so that the program can be "
    "upgraded or removed cleanly later. When you ask it to install a package, it reads the list of "
    "dependencies, works out which other packages are missing and downloads them from the configured "
    "mirrors. Each archive is checked against a signature before anything is unpacked, and a failed check "
    "stops the whole operation. Small scripts inside the package may then create users, start services or "
    "update caches, and everything is written to a log so that an administrator can see later what changed. "
)


@contextmanager
def serving(checkpoint: Path, kind: str | None = None, **options):
    """A :class:`LiveServer` of ``checkpoint``, ready, stopped afterwards; ``kind`` names it for the tests."""
    s = LiveServer(checkpoint, threads=options.pop("threads", 1), **options)
    try:
        s.wait_ready()
        s.kind = kind
        yield s
    finally:
        s.stop()


def get_json(url: str) -> dict:
    import json

    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def post_json(url: str, body: dict) -> dict:
    import json

    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def strongest_head(base_url: str, role: str) -> tuple[int, int]:
    """(layer, head) of the served model's head that scores highest on ``role`` (GET /api/heads)."""
    heads = get_json(base_url + "/api/heads")
    i = heads["roles"].index(role)
    scores = {(li, h): per[i] for li, layer in enumerate(heads["scores"]) for h, per in enumerate(layer)}
    return max(scores, key=scores.get)


def _tokens(base_url: str, text: str) -> dict | None:
    """The server's tokens and offsets for ``text``, or None when it has too many tokens."""
    body = {"text": text, "layers": [0], "heads": [0], "include": ["stats"], "top_k": 0}
    try:
        return post_json(base_url + "/api/attention", body)
    except urllib.error.HTTPError as e:
        if e.code == 422:
            return None
        raise


def text_of_tokens(base_url: str, n_tokens: int) -> str:
    """A prefix of the filler text that the server's tokenizer splits into exactly ``n_tokens`` tokens."""
    text = FILLER * (n_tokens // 30 + 2)
    # the longest prefix the model accepts (binary search on characters), then cut at a token boundary
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _tokens(base_url, text[:mid]) is None:
            hi = mid - 1
        else:
            lo = mid
    res = _tokens(base_url, text[:lo])
    offsets = res["offsets"]
    if len(offsets) < n_tokens:
        raise ValueError(f"could not build a text of {n_tokens} tokens (got {len(offsets)})")
    cut = text[: offsets[n_tokens - 1][1]]
    # BPE may merge differently at the new end: adjust by a character until the count is right
    for _ in range(20):
        got = _tokens(base_url, cut)
        n = len(got["tokens"]) if got else n_tokens + 1
        if n == n_tokens:
            return cut
        cut = cut[:-1] if n > n_tokens else text[: len(cut) + 1]
    raise ValueError(f"could not build a text of exactly {n_tokens} tokens")


# The page's fetch replaced, for a test of the order answers land in: the requests to the path given (the
# URL's path, its query aside) wait until the test releases them (`window.__release(i)`: the i-th one asked
# goes to the server; it resolves once the server answered), or get `window.__answer` ({status, body}) at once
# when the test set one. `window.__asked`: what each asked, in order ({url, body}: the JSON body, or null).
HOLD_FETCH = """(path) => {
  const real = window.fetch;
  const held = [];
  window.__asked = [];
  window.__answer = null;
  window.fetch = (url, init = {}) => {
    if (new URL(String(url), window.location.href).pathname !== path) return real(url, init);
    window.__asked.push({ url: String(url), body: init.body ? JSON.parse(init.body) : null });
    const canned = window.__answer;
    if (canned) return Promise.resolve(new Response(JSON.stringify(canned.body), {
      status: canned.status, headers: { "content-type": "application/json" } }));
    return new Promise((resolve) => held.push(() => real(url, init).then(resolve)));
  };
  window.__release = (i) => held[i]();
}"""
