#!/usr/bin/env bash
# Load test: N requests (default 2,000) at concurrency C (default 16) against a real
# `attnscope serve`, texts of mixed lengths (1 to 256 tokens) and the page's mixed requests.
# Reports every error (there must be none), throughput, latency percentiles, and the
# server's resident memory before, during (peak) and after the run. ROUNDS=2 sends the N
# requests twice to the same server: memory that levels off is the allocator's high-water
# mark, memory that keeps growing would be a leak.
#
#   nice -n 19 bench/load_test.sh                      # the shipped model
#   N=500 C=8 ROUNDS=2 CHECKPOINT=runs/small/checkpoint nice -n 19 bench/load_test.sh
#
# Exits non-zero when any request failed. Needs only python3 with the project installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

N="${N:-2000}"
C="${C:-16}"
ROUNDS="${ROUNDS:-1}"
CHECKPOINT="${CHECKPOINT:-model/checkpoints/attnscope-small}"
PORT="${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
URL="http://127.0.0.1:${PORT}"
LOG="$(mktemp -t attnscope-load.XXXXXX)"

python3 -m attnscope serve --port "$PORT" --checkpoint "$CHECKPOINT" >"$LOG" 2>&1 &
SERVER_PID=$!
stop_server() {
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -INT "$SERVER_PID"
        wait "$SERVER_PID" || true
    fi
}
trap stop_server EXIT

python3 - "$URL" "$SERVER_PID" <<'EOF'
import sys, time, urllib.request
url, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 180
while True:
    try:
        if urllib.request.urlopen(url + "/readyz", timeout=2).status == 200:
            break
    except OSError:
        pass
    try:
        open(f"/proc/{pid}/status").close()
    except OSError:
        sys.exit("the server exited before it was ready")
    if time.monotonic() > deadline:
        sys.exit("the server did not become ready")
    time.sleep(0.2)
EOF

echo "server pid $SERVER_PID at $URL, checkpoint $CHECKPOINT; $N requests at concurrency $C"

python3 - "$URL" "$SERVER_PID" "$N" "$C" "$CHECKPOINT" "$ROUNDS" <<'EOF'
import asyncio
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

from attnscope.model.ours.tokenizer import BPETokenizer

url, pid, total, concurrency, checkpoint = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rounds = int(sys.argv[6])


def rss_kib() -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


PARAGRAPH = (
    "The cat sat on the mat and looked out of the window at the rain. When the rain stopped, the children "
    "went out to play in the garden. They found a small bird under the old tree and carried it inside. "
    "Open the Settings window, choose Network, and switch the connection on or off. "
)
tok = BPETokenizer.load(Path(checkpoint) / "tokenizer.json")
ids = tok.encode_ids(PARAGRAPH * 12)
LENGTHS = [1, 8, 16, 32, 64, 128, 200, 256]
TEXTS = {}
for n in LENGTHS:  # texts of exactly n tokens
    for start in range(40):
        text = tok.decode(ids[start : start + n])
        if text.strip() and len(tok.encode_ids(text)) == n:
            TEXTS[n] = text
            break
ALL = ["pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled", "stats", "q", "k", "v"]


def request(i: int) -> tuple[str, str, dict | None]:
    """The i-th request of the mix: mostly what the page sends while someone types."""
    n = LENGTHS[i % len(LENGTHS)]
    text = TEXTS[n]
    kind = i % 10
    if kind in (0, 1, 2, 3):  # the grid: all heads, pattern + stats
        return "grid", "/api/attention", {"text": text}
    if kind in (4, 5, 6):  # the detail view: one head, every field
        return "head", "/api/attention", {"text": text, "include": ALL, "layers": [i % 4], "heads": [(i // 4) % 4], "top_k": 10}
    if kind == 7:  # what-ifs
        return "what-if", "/api/attention", {"text": text, "causal": False, "scale": "none", "temperature": 0.7}
    if kind == 8:
        return "lesson", "/api/lessons/variance", {"head_size": 16 * (1 + i % 4), "T": 16, "seed": i, "samples": 8}
    return "model", ("/api/model" if i % 20 == 9 else "/api/heads"), None


async def one_round(number: int) -> int:
    """Send ``total`` requests, ``concurrency`` at a time; print the figures; return the errors."""
    counter = iter(range(total))
    latencies: dict[str, list[float]] = {}
    errors: Counter = Counter()
    statuses: Counter = Counter()
    received = 0
    peak = rss_before = rss_kib()
    done = False

    async def sample_rss() -> None:
        nonlocal peak
        while not done:
            peak = max(peak, rss_kib())
            await asyncio.sleep(0.25)

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal received
        for i in counter:
            kind, path, body = request(i)
            t0 = time.perf_counter()
            try:
                r = await (client.get(path) if body is None else client.post(path, json=body))
                statuses[r.status_code] += 1
                received += r.num_bytes_downloaded
                if r.status_code != 200:
                    errors[f"{kind} {r.status_code}: {r.text[:120]}"] += 1
            except httpx.HTTPError as e:
                errors[f"{kind} {type(e).__name__}: {e}"] += 1
            latencies.setdefault(kind, []).append((time.perf_counter() - t0) * 1000)

    sampler = asyncio.create_task(sample_rss())
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    done = True
    await sampler
    await asyncio.sleep(1.0)
    rss_after = rss_kib()

    n_errors = sum(errors.values())
    print(f"round {number}: {total} requests in {elapsed:.1f} s: {total / elapsed:.1f} req/s, {received / 1e6:.1f} MB received (gzip)")
    print(f"status codes: {dict(sorted(statuses.items()))}")
    print(f"errors: {n_errors}")
    for text, count in errors.most_common(10):
        print(f"  {count} x {text}")
    every = [x for values in latencies.values() for x in values]
    p99 = statistics.quantiles(every, n=100, method='inclusive')[98]
    print(f"latency ms (all): p50 {statistics.median(every):.0f}, p99 {p99:.0f}, max {max(every):.0f}")
    for kind, values in sorted(latencies.items()):
        p99 = statistics.quantiles(values, n=100, method='inclusive')[98] if len(values) > 1 else values[0]
        print(f"  {kind:<8} {len(values):>5} requests  p50 {statistics.median(values):7.0f}  p99 {p99:7.0f}")
    print(f"server RSS: before {rss_before / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB, after {rss_after / 1024:.1f} MiB")
    return n_errors


async def main() -> None:
    failed = 0
    for number in range(1, rounds + 1):
        failed += await one_round(number)
    sys.exit(1 if failed else 0)


asyncio.run(main())
EOF
