"""Latency of POST /api/attention against a running attnscope server.

    attnscope serve &                     # in another terminal
    python bench/latency.py [--url http://127.0.0.1:8000] [--repeat 20] [--json]

For texts of about 16, 64 and the model's full context in tokens, it sends the two requests
the page sends while you type (all heads with ``pattern`` and ``stats``; one head with every
field and ten predictions) ``--repeat`` times each, after ``--warmup`` unmeasured ones, one at
a time, and reports per case the token count, the median and 90th percentile of the round
trip, the median of the server's own ``timing_ms`` and the size of the (uncompressed) body.
Only the standard library is used, so it runs from any Python 3.10+.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import urllib.error
import urllib.request

PARAGRAPH = (
    "The cat sat on the mat and looked out of the window at the rain. "
    "When the rain stopped, the children went out to play in the garden. "
    "They found a small bird under the old tree and carried it inside. "
    "Their mother said that the bird needed water, warmth and a quiet place to rest. "
    "By the evening it was hopping around the kitchen, and the cat watched it from the mat. "
)

CASES = {
    "all heads": {"include": ["pattern", "stats"], "top_k": 0},
    "one head, every field": {
        "layers": [0],
        "heads": [0],
        "include": ["pattern", "pattern_unscaled", "attn_scores_raw", "attn_scores", "stats", "q", "k", "v"],
        "top_k": 10,
    },
}


def post(url: str, body: dict, timeout: float = 120.0) -> tuple[dict, int, float]:
    """(parsed answer, body bytes, seconds) of one POST."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw), len(raw), time.perf_counter() - start


def count_tokens(base: str, text: str) -> int | None:
    """Tokens in ``text``; None when it is longer than the model's context (the server's 422)."""
    try:
        answer, _, _ = post(base + "/api/attention", {"text": text, "include": [], "top_k": 0})
    except urllib.error.HTTPError as e:
        if e.code == 422:
            return None
        raise
    return len(answer["tokens"])


def text_of_tokens(base: str, target: int) -> tuple[str, int]:
    """A prefix of the repeated paragraph with at most ``target`` tokens, as close to it as a word allows."""
    words = (PARAGRAPH * (1 + target // 40)).split()
    lo, hi = 1, len(words)  # the longest prefix (in words) whose token count is <= target
    best = (words[0], count_tokens(base, words[0]))
    while lo <= hi:
        mid = (lo + hi) // 2
        text = " ".join(words[:mid])
        n = count_tokens(base, text)
        if n is not None and n <= target:
            best = (text, n)
            lo = mid + 1
        else:
            hi = mid - 1
    return best


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def run(base: str, repeat: int, warmup: int) -> list[dict]:
    with urllib.request.urlopen(base + "/api/model", timeout=60) as resp:
        model = json.loads(resp.read())
    context = int(model["block_size"])
    targets = sorted({min(n, context) for n in (16, 64, context)})
    rows = []
    for target in targets:
        text, n_tokens = text_of_tokens(base, target)
        for case, extra in CASES.items():
            body = {"text": text, **extra}
            for _ in range(warmup):
                post(base + "/api/attention", body)
            wall, server, size = [], [], 0
            for _ in range(repeat):
                answer, size, seconds = post(base + "/api/attention", body)
                wall.append(seconds * 1000)
                server.append(answer["timing_ms"])
            rows.append(
                {
                    "case": case,
                    "tokens": n_tokens,
                    "median_ms": round(statistics.median(wall), 1),
                    "p90_ms": round(percentile(wall, 0.9), 1),
                    "server_median_ms": round(statistics.median(server), 1),
                    "response_kb": round(size / 1024, 1),
                    "repeat": repeat,
                }
            )
    return [{"model": {k: model.get(k) for k in ("name", "n_layer", "n_head", "block_size", "device")}}, *rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=20, help="measured requests per case (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured requests per case first (default %(default)s)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        ap.error("--repeat must be at least 1 and --warmup at least 0")
    base = args.url.rstrip("/")
    try:
        header, *rows = run(base, args.repeat, args.warmup)
    except (urllib.error.URLError, OSError) as e:
        print(f"latency.py: cannot talk to {base}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**header, "rows": rows}, indent=2))
        return 0
    m = header["model"]
    print(f"{m['name']}: {m['n_layer']} layers x {m['n_head']} heads, context {m['block_size']}, on {m['device']}")
    print(f"{args.repeat} requests per case, one at a time, after {args.warmup} warm-up requests\n")
    print("| case | tokens | median ms | p90 ms | server median ms | response KB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['case']} | {r['tokens']} | {r['median_ms']} | {r['p90_ms']} | "
            f"{r['server_median_ms']} | {r['response_kb']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
