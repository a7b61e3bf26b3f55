"""What POST /api/attention costs, against the real server, next to the bare model call.

    nice -n 19 python bench/api_bench.py [--checkpoint DIR] [--repeat 30] [--json OUT.json]

1. Starts ``python -m app serve`` (uvicorn) on a free port with the checkpoint (default:
   the shipped model) and waits for ``/readyz``.
2. For texts of exactly 16, 64 and 256 tokens it sends, one at a time, ``--repeat`` times
   after ``--warmup`` unmeasured ones:
   (a) ``grid``: every layer and head, ``include=["pattern", "stats"]`` (the page's grid);
   (b) ``head``: one head, every field (the page's detail view);
   (c) ``all``: every layer and head, every field (like for like with the plain approach);
   and reports p50/p99 of the round trip, p50 of the server's own time (``X-Timing-Ms``:
   from the handler to the last encoded byte, before gzip) and the body size without and
   with gzip.
3. In this process, on the same checkpoint and thread count: the bare
   ``model.inspection.inspect()`` call, and the plain approach: ``inspect()`` +
   ``head_stats()`` + ``json.dumps`` of ``.tolist()`` of every tensor at full precision.
4. Prints the ratios against the targets: server time of the grid view at most 1.5x the bare
   inspection; the served answer at least 3x faster and 3x smaller than the plain approach.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import socket
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

from model.checkpoint import SHIPPED, load_checkpoint  # noqa: E402
from model.inspection import head_stats, inspect  # noqa: E402

ALL_FIELDS = ["pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled", "stats", "q", "k", "v"]
PARAGRAPH = (
    "The cat sat on the mat and looked out of the window at the rain. When the rain stopped, the "
    "children went out to play in the garden. They found a small bird under the old tree and carried "
    "it inside. Their mother said that the bird needed water, warmth and a quiet place to rest. By the "
    "evening it was hopping around the kitchen, and the cat watched it from the mat. "
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def start_server(checkpoint: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "ATTNSCOPE_CHECKPOINT": str(checkpoint)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--checkpoint", str(checkpoint)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not become ready")


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def served(client: httpx.Client, body: dict) -> tuple[float, float, int]:
    """One request: (round trip ms, server ms, body bytes without gzip)."""
    t0 = time.perf_counter()
    r = client.post("/api/attention", json=body, headers={"Accept-Encoding": "identity"})
    latency = (time.perf_counter() - t0) * 1000
    r.raise_for_status()
    return latency, float(r.headers["x-timing-ms"]), len(r.content)


def gzip_size(client: httpx.Client, body: dict) -> int:
    """The body size as sent with gzip (the bytes on the wire)."""
    with client.stream("POST", "/api/attention", json=body, headers={"Accept-Encoding": "gzip"}) as r:
        r.raise_for_status()
        assert r.headers.get("content-encoding") == "gzip"
        return sum(len(chunk) for chunk in r.iter_raw())


def ms(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def measure_length(
    client: httpx.Client, lm, text: str, views: dict, repeat: int, warmup: int, plain_every: int
) -> dict:
    """Interleaved: each round sends every view once and runs the bare inspection once (and,
    every ``plain_every`` rounds, the plain approach), so that all of them meet the same load
    on the machine."""
    samples = {name: {"latency": [], "server": [], "bytes": 0} for name in views}
    bare, plain, plain_body = [], [], ""
    for i in range(warmup + repeat):
        for name, view in views.items():
            latency, server, size = served(client, {"text": text, **view})
            if i >= warmup:
                samples[name]["latency"].append(latency)
                samples[name]["server"].append(server)
                samples[name]["bytes"] = size
        t, _ = ms(lambda: inspect(lm.model, lm.tokenizer, text))
        if i >= warmup:
            bare.append(t)
        if i >= warmup and (i - warmup) % plain_every == 0:
            t, plain_body = ms(lambda: plain_approach(lm, text))
            plain.append(t)
    row = {}
    for name, view in views.items():
        s = samples[name]
        row[name] = {
            "p50_ms": pct(s["latency"], 50),
            "p99_ms": pct(s["latency"], 99),
            "server_p50_ms": pct(s["server"], 50),
            "bytes": s["bytes"],
            "bytes_gzip": gzip_size(client, {"text": text, **view}),
        }
    raw = plain_body.encode()
    row["bare_inspect_ms"] = statistics.median(bare)
    row["plain"] = {"ms": statistics.median(plain), "bytes": len(raw), "bytes_gzip": len(gzip.compress(raw, 1))}
    return row


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


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=SHIPPED)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--lengths", default="16,64,256")
    ap.add_argument("--plain-every", type=int, default=5, help="run the (slow) plain approach every N rounds")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)

    lm = load_checkpoint(args.checkpoint, "cpu")
    from app.settings import Settings

    torch.set_num_threads(Settings().threads)  # what the server uses
    lengths = [int(x) for x in args.lengths.split(",")]
    texts = {T: text_of(lm.tokenizer, T) for T in lengths if T <= lm.config.block_size}
    mid_layer, mid_head = lm.config.n_layer // 2, lm.config.n_head // 2
    views = {
        "grid": {"include": ["pattern", "stats"]},
        "head": {"include": ALL_FIELDS, "layers": [mid_layer], "heads": [mid_head], "top_k": 10},
        "all": {"include": ALL_FIELDS},
    }

    port = free_port()
    proc = start_server(args.checkpoint, port)
    results: dict = {"checkpoint": str(args.checkpoint), "torch_threads": torch.get_num_threads(), "lengths": {}}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
            for T, text in texts.items():
                results["lengths"][T] = measure_length(
                    client, lm, text, views, args.repeat, args.warmup, plain_every=args.plain_every
                )
    finally:
        stop_server(proc)

    for row in results["lengths"].values():
        plain = row["plain"]
        row["ratios"] = {
            "grid_server_over_bare": row["grid"]["server_p50_ms"] / row["bare_inspect_ms"],
            "head_server_over_bare": row["head"]["server_p50_ms"] / row["bare_inspect_ms"],
            **{
                f"plain_over_{name}_{what}": plain[key] / row[name][field]
                for name in ("grid", "head", "all")
                for what, key, field in (("time", "ms", "server_p50_ms"), ("bytes", "bytes", "bytes"))
            },
        }

    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


def report(results: dict) -> None:
    print(f"checkpoint {results['checkpoint']}, torch threads {results['torch_threads']}")
    print(f"{'T':>4} {'view':<5} {'p50 ms':>8} {'p99 ms':>8} {'server ms':>10} {'bytes':>11} {'gzip bytes':>11}")
    for T, row in results["lengths"].items():
        for name in ("grid", "head", "all"):
            v = row[name]
            print(
                f"{T:>4} {name:<5} {v['p50_ms']:>8.1f} {v['p99_ms']:>8.1f} {v['server_p50_ms']:>10.1f} "
                f"{v['bytes']:>11,} {v['bytes_gzip']:>11,}"
            )
        p = row["plain"]
        print(f"{T:>4} {'plain':<5} {'':>8} {'':>8} {p['ms']:>10.1f} {p['bytes']:>11,} {p['bytes_gzip']:>11,}")
        print(f"{T:>4} {'bare':<5} {'':>8} {'':>8} {row['bare_inspect_ms']:>10.1f}   (inspect() in-process)")
    print()
    print("ratios (targets: server time of the views <= 1.5x the bare inspect(); plain approach >= 3x slower and")
    print("        >= 3x larger than the views the page asks for; 'all' = every field of every head, for comparison)")
    for T, row in results["lengths"].items():
        r = row["ratios"]
        ok = (
            r["grid_server_over_bare"] <= 1.5
            and min(r["plain_over_grid_time"], r["plain_over_head_time"]) >= 3
            and min(r["plain_over_grid_bytes"], r["plain_over_head_bytes"]) >= 3
        )
        print(
            f"  T={T:>3}: server/bare: grid {r['grid_server_over_bare']:.2f}x, head {r['head_server_over_bare']:.2f}x;"
            f" plain/served time: grid {r['plain_over_grid_time']:.1f}x, head {r['plain_over_head_time']:.1f}x,"
            f" all {r['plain_over_all_time']:.1f}x; bytes: grid {r['plain_over_grid_bytes']:.1f}x,"
            f" head {r['plain_over_head_bytes']:.1f}x, all {r['plain_over_all_bytes']:.1f}x"
            f"  {'ok' if ok else 'MISSED'}"
        )
