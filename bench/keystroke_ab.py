"""A keystroke's cost, two checkouts side by side: interleaved rounds against two running servers.

    nice -n 19 python bench/keystroke_ab.py --old /work/wt_old [--tokens 256] [--rounds 6] [--repeats 20] [--browser]

Starts ``python -m attnscope serve`` twice on the same checkpoint and thread count: this checkout
("new") and ``--old`` (another checkout of the repository with its own ``.venv``), then measures
in rounds that alternate which side goes first, so that both meet the same load on a shared machine:

* server: what the page sends on a keystroke at ``--tokens`` tokens, the grid's body and the chosen
  head's, sent together as the page sends them; per pair the wall time of both and the server's own
  ``X-Timing-Ms`` of each;
* with ``--browser``: ``bench/browser_bench.py``'s keystroke-to-redraw in headless Chromium, each
  server serving its own page.

Prints the medians of each side per round and over all rounds, and new ÷ old.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.kit.live import CHROMIUM, chromium, free_port, text_of_tokens  # noqa: E402


def start(root: Path, checkpoint: Path, threads: int) -> tuple[subprocess.Popen, str]:
    """``attnscope serve`` of the checkout at ``root`` (its own .venv), ready; its process and URL."""
    port = free_port()
    env = {**os.environ, "ATTNSCOPE_CHECKPOINT": str(checkpoint), "ATTNSCOPE_TORCH_THREADS": str(threads)}
    log = open(tempfile.mkstemp(prefix="attnscope-ab-", suffix=".log")[1], "w")  # noqa: SIM115 - the child's
    python = root / ".venv" / "bin" / "python"
    cmd = [str(python), "-m", "attnscope", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--checkpoint", str(checkpoint)], cwd=root, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"{root}: the server was not ready")


def page_bodies(text: str, n_layer: int) -> list[dict]:
    """What the page sends for a short text (frontend/js/requests.js): the grid's body and the chosen head's."""
    grid = {"text": text, "include": ["stats"], "stats_rows": False, "thumbnail": 64, "encoding": "b64", "top_k": 0}
    fields = ["pattern", "pattern_unscaled", "attn_scores_raw", "attn_scores_uncapped", "attn_scores", "stats"]
    head = {
        "text": text, "layers": [n_layer // 2], "heads": [0], "include": [*fields, "q", "k"],
        "encoding": "b64", "precision": "f4", "top_k": 10, "temperature": 1.0,
    }
    what_ifs = {"causal": True, "scale": "model", "ablate": []}
    return [{**grid, **what_ifs}, {**head, **what_ifs}]


def post(url: str, body: dict) -> float:
    """One POST /api/attention read to its end; the server's own time (X-Timing-Ms)."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(url + "/api/attention", data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        r.read()
        return float(r.headers["X-Timing-Ms"])


def keystroke(pool: ThreadPoolExecutor, url: str, bodies: list[dict]) -> dict:
    """Both bodies sent together, as the page does: the wall time of the pair and each one's server time."""
    t0 = time.perf_counter()
    server = list(pool.map(lambda b: post(url, b), bodies))
    return {"wall": (time.perf_counter() - t0) * 1000, "grid": server[0], "head": server[1]}


def med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=Path, required=True, help="the other checkout (with its own .venv)")
    ap.add_argument("--checkpoint", type=Path, default=None, help="default: the shipped model of this checkout")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=20, help="keystrokes per side per round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--browser", action="store_true", help="also the page's keystroke in headless Chromium")
    args = ap.parse_args(argv)
    from attnscope.model.ours.checkpoint import SHIPPED

    checkpoint = args.checkpoint or SHIPPED
    sides = {"new": start(REPO, checkpoint, args.threads), "old": start(args.old.resolve(), checkpoint, args.threads)}
    try:
        url = sides["new"][1]
        text = text_of_tokens(url, args.tokens)
        with urllib.request.urlopen(url + "/api/model") as r:
            n_layer = json.loads(r.read())["n_layer"]
        bodies = page_bodies(text, n_layer)
        server: dict[str, list[dict]] = {"new": [], "old": []}
        browser: dict[str, list[float]] = {"new": [], "old": []}
        with ThreadPoolExecutor(2) as pool:
            for name in sides:  # warm both
                for _ in range(3):
                    keystroke(pool, sides[name][1], bodies)
            for r in range(args.rounds):
                order = ["new", "old"] if r % 2 == 0 else ["old", "new"]
                line = []
                for name in order:
                    rows = [keystroke(pool, sides[name][1], bodies) for _ in range(args.repeats)]
                    server[name] += rows
                    line.append(f"{name} pair {med(rows, 'wall'):6.1f} ms (grid {med(rows, 'grid'):5.1f}, "
                                f"head {med(rows, 'head'):5.1f})")
                    if args.browser:
                        browser[name].append(browser_round(sides[name][1], args.tokens, args.repeats))
                        line.append(f"{name} page {browser[name][-1]:6.1f} ms")
                print(f"round {r + 1}: " + "; ".join(line), flush=True)
    finally:
        for proc, _ in sides.values():
            proc.terminate()
            proc.wait(timeout=20)
    print(f"\n{args.tokens} tokens, {args.rounds} rounds × {args.repeats} keystrokes a side, {args.threads} threads")
    for key in ("wall", "grid", "head"):
        new, old = med(server["new"], key), med(server["old"], key)
        print(f"  server {key:<5} new {new:7.1f} ms  old {old:7.1f} ms  new/old {new / old:5.2f}")
    if args.browser:
        new, old = statistics.median(browser["new"]), statistics.median(browser["old"])
        print(f"  page keystroke (median of round medians) new {new:7.1f} ms  old {old:7.1f} ms  "
              f"new/old {new / old:5.2f}")
    return 0


def browser_round(url: str, tokens: int, repeats: int) -> float:
    """One round of bench/browser_bench.py's keystroke against ``url``: the median keystroke-to-redraw."""
    from bench.browser_bench import measure

    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        return measure(page, url, tokens, repeats, 3, None)["drawn_median_ms"]


if __name__ == "__main__":
    sys.exit(main())
