"""What POST /api/attention costs, against the real server, next to the bare model call.

    nice -n 19 python bench/api_bench.py [--checkpoint DIR] [--repeat 30] [--threads 1] [--json OUT.json]

1. Starts ``python -m attnscope serve`` (uvicorn, the real server) on a free port with the
   checkpoint (default: the shipped model) and ``--threads`` torch threads, and waits for
   ``/readyz``.
2. For texts of exactly 16, 64 and 256 tokens it sends, one request at a time, ``--repeat``
   rounds after ``--warmup`` unmeasured ones, each round one request of each view:
   (a) ``grid``: every layer and head, ``include=["pattern", "stats"]``, ``top_k=0`` (the page's grid request);
   (b) ``head``: one head, every field, ten predictions (the page's detail view);
   (c) ``all``: every layer and head, every field (like for like with the plain approach).
   Per view: p50/p99 of the round trip, p50 of the server's own time (``X-Timing-Ms``: from
   the route to the last encoded byte, before gzip), the server process's CPU time per
   request (from /proc, averaged over the rounds), and the body size without and with gzip.
3. In this process, with the same thread count and allocator setting, and in the same
   rounds (so that both meet the same load on the machine): the bare
   ``model.inspection.inspect()`` call, and the plain approach, ``inspect()`` +
   ``head_stats()`` + ``json.dumps`` of ``.tolist()`` of every tensor at full precision;
   wall and CPU time of each.
4. Prints the ratios against the targets: server time of the views at most 1.5x the bare
   inspection; the views at least 3x faster and 3x smaller than the plain approach.

On a busy machine wall-clock times swing with the load; the CPU times (one torch thread by
default, so that no thread spins waiting for another) are steadier, so the ratios are given
for both; the targets are judged on the server's own time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from attnscope.model.inspection import head_stats, inspect  # noqa: E402
from attnscope.model.ours.checkpoint import SHIPPED  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.app import free_port, stop_server, wait_ready  # noqa: E402  (the tests' own helpers, not a copy)

ALL_FIELDS = ["pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled", "stats", "q", "k", "v"]
PARAGRAPH = (
    "The cat sat on the mat and looked out of the window at the rain. When the rain stopped, the "
    "children went out to play in the garden. They found a small bird under the old tree and carried "
    "it inside. Their mother said that the bird needed water, warmth and a quiet place to rest. By the "
    "evening it was hopping around the kitchen, and the cat watched it from the mat. "
)
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def text_of(tokenizer, n_tokens: int) -> str:
    """A piece of English that encodes to exactly ``n_tokens`` tokens."""
    ids = tokenizer.encode_ids(PARAGRAPH * (1 + n_tokens // 40))
    for start in range(0, 40):
        text = tokenizer.decode(ids[start : start + n_tokens])
        if len(tokenizer.encode_ids(text)) == n_tokens:
            return text
    raise RuntimeError(f"no text of exactly {n_tokens} tokens found")


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def process_cpu_ms(pid: int) -> float:
    """User + system CPU time of a process so far, in ms (from /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS  # utime, stime


def start_server(checkpoint: Path, port: int, threads: int) -> subprocess.Popen:
    env = {**os.environ, "ATTNSCOPE_CHECKPOINT": str(checkpoint), "ATTNSCOPE_TORCH_THREADS": str(threads)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnscope", "serve", "--port", str(port), "--checkpoint", str(checkpoint)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_ready(proc, port, within=180)
    return proc


def gzip_size(client: httpx.Client, body: dict) -> int:
    """The body size as sent with gzip (the bytes on the wire)."""
    with client.stream("POST", "/api/attention", json=body, headers={"Accept-Encoding": "gzip"}) as r:
        r.raise_for_status()
        assert r.headers.get("content-encoding") == "gzip"
        return sum(len(chunk) for chunk in r.iter_raw())


def timed(fn) -> tuple[float, float, object]:
    """(wall ms, CPU ms of this process, result)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return (time.perf_counter() - w) * 1000, (time.process_time() - c) * 1000, out


def plain_approach(lm, text: str) -> str:
    """What a first version would do: every tensor, full precision, through Python lists."""
    trace = inspect(lm.model, lm.tokenizer, text)
    stats = head_stats(trace)
    payload = {
        "tokens": trace.tokens,
        "token_ids": trace.token_ids,
        "offsets": trace.offsets,
        "mask": trace.mask.int().tolist(),
        **{
            name: getattr(trace, name).tolist()
            for name in ("q", "k", "v", "attn_scores_raw", "attn_scores", "pattern", "pattern_unscaled")
        },
        "stats": {name: getattr(stats, name).tolist() for name in stats.__dataclass_fields__},
        "predictions": torch.softmax(trace.logits, -1).topk(5).indices.tolist(),
    }
    return json.dumps(payload)


def measure_length(client, pid: int, lm, text: str, views: dict, repeat: int, warmup: int, plain_every: int) -> dict:
    """Rounds of: each view once, the bare inspection once, and every ``plain_every`` rounds
    the plain approach, so that all of them meet the same load on the machine."""
    samples = {name: {"latency": [], "server": [], "cpu": [], "bytes": 0} for name in views}
    bare = {"wall": [], "cpu": []}
    plain = {"wall": [], "cpu": [], "body": ""}
    for i in range(warmup + repeat):
        measured = i >= warmup
        for name, view in views.items():
            cpu0 = process_cpu_ms(pid)
            t0 = time.perf_counter()
            r = client.post("/api/attention", json={"text": text, **view}, headers={"Accept-Encoding": "identity"})
            latency = (time.perf_counter() - t0) * 1000
            r.raise_for_status()
            cpu = process_cpu_ms(pid) - cpu0
            if measured:
                s = samples[name]
                s["latency"].append(latency)
                s["server"].append(float(r.headers["x-timing-ms"]))
                s["cpu"].append(cpu)
                s["bytes"] = len(r.content)
        wall, cpu, _ = timed(lambda: inspect(lm.model, lm.tokenizer, text))
        if measured:
            bare["wall"].append(wall)
            bare["cpu"].append(cpu)
            if (i - warmup) % plain_every == 0:
                wall, cpu, plain["body"] = timed(lambda: plain_approach(lm, text))
                plain["wall"].append(wall)
                plain["cpu"].append(cpu)
    row = {}
    for name, view in views.items():
        s = samples[name]
        row[name] = {
            "p50_ms": pct(s["latency"], 50),
            "p99_ms": pct(s["latency"], 99),
            "server_p50_ms": pct(s["server"], 50),
            "server_cpu_ms": statistics.mean(s["cpu"]),  # /proc ticks are 10 ms: the mean, not a percentile
            "bytes": s["bytes"],
            "bytes_gzip": gzip_size(client, {"text": text, **view}),
        }
    raw = plain["body"].encode()
    row["bare"] = {"p50_ms": statistics.median(bare["wall"]), "cpu_ms": statistics.mean(bare["cpu"])}
    row["plain"] = {
        "p50_ms": statistics.median(plain["wall"]),
        "cpu_ms": statistics.mean(plain["cpu"]),
        "bytes": len(raw),
        "bytes_gzip": len(gzip.compress(raw, 1)),
    }
    return row


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=SHIPPED)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads, in the server and here")
    ap.add_argument("--lengths", default="16,64,256")
    ap.add_argument("--plain-every", type=int, default=5, help="run the (slow) plain approach every N rounds")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    from attnscope.app.lifespan import limit_heap_retention

    limit_heap_retention()  # the server's allocator setting, so that both pay the same page faults
    lm = load_model(args.checkpoint, "cpu")
    lengths = [int(x) for x in args.lengths.split(",")]
    texts = {T: text_of(lm.tokenizer, T) for T in lengths if T <= lm.config.block_size}
    mid_layer, mid_head = lm.config.n_layer // 2, lm.config.n_head // 2
    views = {
        "grid": {"include": ["pattern", "stats"], "top_k": 0},  # as the page asks for it
        "head": {"include": ALL_FIELDS, "layers": [mid_layer], "heads": [mid_head], "top_k": 10},
        "all": {"include": ALL_FIELDS},
    }

    port = free_port()
    proc = start_server(args.checkpoint, port, args.threads)
    results: dict = {"checkpoint": str(args.checkpoint), "torch_threads": args.threads, "lengths": {}}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
            for T, text in texts.items():
                results["lengths"][T] = measure_length(
                    client, proc.pid, lm, text, views, args.repeat, args.warmup, args.plain_every
                )
    finally:
        stop_server(proc)

    for row in results["lengths"].values():
        bare, plain = row["bare"], row["plain"]
        ratios = {}
        for name in ("grid", "head", "all"):
            v = row[name]
            ratios[name] = {
                "server_over_bare_wall": v["server_p50_ms"] / bare["p50_ms"],
                "server_over_bare_cpu": v["server_cpu_ms"] / bare["cpu_ms"],
                "plain_over_served_wall": plain["p50_ms"] / v["server_p50_ms"],
                "plain_over_served_cpu": plain["cpu_ms"] / v["server_cpu_ms"],
                "plain_over_served_bytes": plain["bytes"] / v["bytes"],
            }
        row["ratios"] = ratios

    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


def report(results: dict) -> None:
    print(f"checkpoint {results['checkpoint']}, torch threads {results['torch_threads']} (server and bench)")
    head = (
        f"{'T':>4} {'view':<6} {'p50 ms':>8} {'p99 ms':>8} {'server ms':>10} {'server CPU':>11}"
        f" {'bytes':>12} {'gzip bytes':>11}"
    )
    print(head)
    for T, row in results["lengths"].items():
        for name in ("grid", "head", "all"):
            v = row[name]
            print(
                f"{T:>4} {name:<6} {v['p50_ms']:>8.1f} {v['p99_ms']:>8.1f} {v['server_p50_ms']:>10.1f} "
                f"{v['server_cpu_ms']:>11.1f} {v['bytes']:>12,} {v['bytes_gzip']:>11,}"
            )
        b, p = row["bare"], row["plain"]
        print(f"{T:>4} {'bare':<6} {'':>8} {'':>8} {b['p50_ms']:>10.1f} {b['cpu_ms']:>11.1f}   inspect() in-process")
        print(
            f"{T:>4} {'plain':<6} {'':>8} {'':>8} {p['p50_ms']:>10.1f} {p['cpu_ms']:>11.1f} "
            f"{p['bytes']:>12,} {p['bytes_gzip']:>11,}"
        )
    print()
    print("ratios: server time (X-Timing-Ms, wall) / bare inspect(), CPU in brackets (the server's CPU includes HTTP);")
    print("targets: <= 1.5 for the page's views (grid, head); plain approach / served >= 3 in time and in bytes;")
    print("'all' (every field of every head) is shown for comparison only")
    for T, row in results["lengths"].items():
        for name in ("grid", "head", "all"):
            r = row["ratios"][name]
            ok = (
                r["server_over_bare_wall"] <= 1.5
                and r["plain_over_served_wall"] >= 3
                and r["plain_over_served_bytes"] >= 3
            )
            verdict = "" if name == "all" else ("  ok" if ok else "  MISSED")
            print(
                f"  T={T:>3} {name:<5}"
                f" server/bare {r['server_over_bare_wall']:5.2f}x ({r['server_over_bare_cpu']:5.2f}x)"
                f"  plain/served time {r['plain_over_served_wall']:6.1f}x ({r['plain_over_served_cpu']:6.1f}x)"
                f"  bytes {r['plain_over_served_bytes']:6.1f}x{verdict}"
            )


if __name__ == "__main__":
    main()
