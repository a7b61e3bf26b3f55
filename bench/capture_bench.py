"""The page's request over HTTP against the bare forward pass, at the lengths people study; printed.

    python bench/capture_bench.py [--cases gpt2-small:1024,smollm2:4096] [--repeat 3] [--threads 2]
                                  [--device cpu|cuda] [--compile] [--ops] [--profile] [--json OUT.json]

Models are random weights of real shapes, built from transformers configs into a temporary folder
(no download): ``gpt2-small`` (12 layers × 12 heads, d 768; opens in our GPT) and ``smollm2``
(SmolLM2-135M: 30 layers × 9 query heads over 3 key/value heads, d 576; the transformers
backend), each with our 4096-token vocabulary (the vocabulary does not change the attention).

For each case it starts ``python -m attnscope serve`` on the model (a child process, the same
torch threads) and measures:

* ``bare``: in this process, transformers' forward on the same weights and tokens: eager with
  ``output_attentions=True`` for GPT-2 (what a script that wants the attention runs), SDPA
  without attentions for SmolLM2 (the fastest forward pass there is);
* ``page``: the page's request over HTTP (``Accept-Encoding`` as Chromium sends it, so zstd; ``--accept
  gzip`` for older browsers): every head as a 64×64
  thumbnail with statistics, the focus head's pattern, raw scores and statistics (max-pooled to
  256×256 when T > 1024), five predictions, b64; its wall time, its size on the wire, and how much the
  server's peak resident memory (VmHWM) grew while answering it.

``--profile`` also runs each case's page request in this process (no HTTP) and prints where its
time goes: the server's phases, gzip and zstd at the server's levels, the torch operations with the most
device and host time, and the Python functions with the most cumulative time.

``--compile`` serves with ``ATTNSCOPE_COMPILE=1`` (the statistics' block passes compiled) and
warms the server up on the measured request itself, so that no repeat waits for the compiler.

``--ops`` also prints the torch operations one capture runs per layer for 4, 12 and 32 heads (a
2-layer model, 256 tokens), which must not grow with the heads, and the device-to-host copies per
request (on CUDA: the profiler's Memcpy DtoH count).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from api_bench import PARAGRAPH, free_port  # noqa: E402
from attnscope.model.ours.checkpoint import SHIPPED  # noqa: E402
from attnscope.model.ours.tokenizer import BPETokenizer  # noqa: E402

from tests.kit.family import random_download  # noqa: E402

SHAPES = {  # transformers config kwargs of each case's model
    "gpt2-small": dict(model_type="gpt2", n_layer=12, n_head=12, n_embd=768, n_positions=1024),
    "smollm2": dict(
        model_type="llama",
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        hidden_size=576,
        intermediate_size=1536,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        tie_word_embeddings=True,
    ),
}


def build(name: str, out: Path) -> Path:
    return random_download(out, **SHAPES[name])


def text_of(n_tokens: int) -> tuple[str, list[int]]:
    tok = BPETokenizer.load(SHIPPED / "tokenizer.json")
    ids = tok.encode_ids(PARAGRAPH * (1 + n_tokens // 40))[:n_tokens]
    text = tok.decode(ids)
    return text, tok.encode_ids(text)


def page_request(text: str, T: int, n_layer: int, n_head: int) -> dict:
    focus = {"layer": n_layer // 2, "head": n_head // 2, "include": ["pattern", "attn_scores_raw", "stats"]}
    if T > 1024:
        focus["thumbnail"] = 256
    return dict(
        text=text, include=["stats"], stats_rows=False, thumbnail=64, focus=focus, encoding="b64", top_k=5
    )


CHROMIUM_ACCEPTS = "gzip, deflate, br, zstd"  # the page's Accept-Encoding in Chromium 123+


def post(port: int, body: dict, accept: str = CHROMIUM_ACCEPTS) -> tuple[float, int, dict[str, float]]:
    """Wall ms over HTTP, the bytes on the wire, and the server's phases (its ``Server-Timing`` header)."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/attention",
        data=data,
        headers={"Content-Type": "application/json", "Accept-Encoding": accept},
    )
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=900) as r:
        raw = r.read()
        assert r.status == 200
        phases = dict(part.strip().split(";dur=") for part in r.headers["Server-Timing"].split(","))
    return (time.perf_counter() - t) * 1000, len(raw), {k: float(v) for k, v in phases.items()}


def memory_kb(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def bare_forward(path: Path, name: str, ids: list[int], device: str):
    from transformers import AutoModelForCausalLM

    implementation = "eager" if name == "gpt2-small" else "sdpa"
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=implementation).to(device).eval()
    idx = torch.tensor([ids], device=device)

    def run():
        with torch.inference_mode():
            out = model(idx, output_attentions=implementation == "eager", logits_to_keep=1)
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    return run


def bench_case(
    name: str, T: int, repeat: int, threads: int, device: str, tmp: Path, accept: str, compiled: bool = False
) -> dict:
    path = build(name, tmp / name)
    text, ids = text_of(T)
    cfg = json.loads((path / "config.json").read_text())
    n_layer = cfg.get("n_layer") or cfg["num_hidden_layers"]
    n_head = cfg.get("n_head") or cfg["num_attention_heads"]
    body = page_request(text, len(ids), n_layer, n_head)

    port = free_port()
    env = {**os.environ, "ATTNSCOPE_TORCH_THREADS": str(threads), "ATTNSCOPE_DEVICE": device}
    env["ATTNSCOPE_COMPILE"] = "1" if compiled else "0"
    server = subprocess.Popen(
        [sys.executable, "-m", "attnscope", "serve", "--checkpoint", str(path), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(3000 if compiled else 600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        post(port, {**body, "text": "warm up", "focus": {**body["focus"], "thumbnail": None}})
        if compiled:  # this length's blocks compiled before any repeat
            post(port, body, accept)
        before = memory_kb(server.pid)
        bare = bare_forward(path, name, ids, device)
        bare()  # warm-up
        times = {"bare": [], "page": []}
        size, phases = 0, []
        for _ in range(repeat):  # interleaved, so that a busy machine slows both alike
            t = time.perf_counter()
            bare()
            times["bare"].append((time.perf_counter() - t) * 1000)
            ms, size, timing = post(port, body, accept)
            times["page"].append(ms)
            phases.append(timing)
        after = memory_kb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {
        "model": name,
        "T": len(ids),
        "compiled": compiled,
        "ms": med,
        "ratio": med["page"] / med["bare"],
        "accept_encoding": accept,
        "wire_bytes": size,
        "server_ms": {k: float(np.median([p[k] for p in phases])) for k in phases[0]},
        "server_peak_growth_mib": (after["VmHWM"] - before["VmRSS"]) / 1024,
        "bare_kind": "eager + output_attentions" if name == "gpt2-small" else "sdpa, no attentions",
    }


def profile_case(name: str, T: int, device: str, tmp: Path) -> None:
    """One page request in this process: its phases, compression, the heaviest torch ops and Python functions."""
    import cProfile
    import gzip
    import pstats

    import zstandard
    from attnscope.app import compression
    from attnscope.app.compute.attention import attention_json
    from attnscope.app.schemas.attention import AttentionRequest
    from attnscope.app.schemas.subject import with_text_limit
    from attnscope.app.service import build_service
    from attnscope.app.subject import subject_of
    from attnscope.model.registry import load_model
    from torch.profiler import ProfilerActivity, profile

    path = build(name, tmp / name)
    text, ids = text_of(T)
    svc = build_service(load_model(path, device), with_heads=False)
    facts = svc.loaded.facts
    limited = with_text_limit(AttentionRequest, svc.info["limits"]["max_text_chars"])
    req = limited(**page_request(text, len(ids), facts.n_layer, facts.n_head))
    for _ in range(2):  # warm-up
        content, timings = attention_json(svc, req, subject_of(svc, req))
    packers = {
        f"gzip {compression.GZIP_LEVEL}": lambda b: gzip.compress(b, compresslevel=compression.GZIP_LEVEL),
        f"zstd {compression.ZSTD_LEVEL}": zstandard.ZstdCompressor(level=compression.ZSTD_LEVEL).compress,
    }
    packed = []
    for codec, pack in packers.items():
        started = time.perf_counter()
        size = len(pack(content))
        packed.append(f"{codec} {(time.perf_counter() - started) * 1000:.1f} ms to {size / 1e6:.1f} MB")
    phases = ", ".join(f"{k} {v:.1f} ms" for k, v in timings.items())
    print(f"\n{name} T={len(ids)} on {device}: {phases}; {len(content) / 1e6:.1f} MB: {', '.join(packed)}")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        attention_json(svc, req, subject_of(svc, req))
    sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=12, max_name_column_width=48))
    if device == "cuda":
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=48))
    profiler = cProfile.Profile()
    profiler.enable()
    attention_json(svc, req, subject_of(svc, req))
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


def ops_per_layer(device: str, compiled: bool = False) -> list[dict]:
    """torch operations one capture runs per layer, for 4, 12 and 32 heads of 16 dims, at 256 tokens
    (with ``compiled``, each compiled call counts as one)."""
    from attnscope.model.backends import OursBackend
    from attnscope.model.capture import Capture, CapturePlan
    from attnscope.model.ours.gpt import GPT, AttentionOptions, GPTConfig
    from torch.profiler import ProfilerActivity, profile

    rows = []
    for nh in (4, 12, 32):
        model = GPT(GPTConfig(block_size=256, vocab_size=256, n_layer=2, n_head=nh, n_embd=16 * nh))
        backend = OursBackend(model, None, torch.device(device))
        ids = list(range(256))

        def request(backend=backend, nh=nh, ids=ids):
            sel = CapturePlan(
                layers=[0, 1],
                heads=list(range(nh)),
                stats=True,
                thumbnail=64,
                focus=(1, nh // 2),
                focus_fields=frozenset({"pattern", "attn_scores_raw", "stats"}),
                fuse=compiled,
            )
            cap = Capture(sel)
            backend.hidden(ids, AttentionOptions(), cap)
            cap.finish()
            return cap

        request()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=activities) as prof:
            cap = request()
        events = prof.events()
        top = [e for e in events if e.cpu_parent is None and (e.name.startswith("aten::") or _compiled_call(e.name))]
        copies = sum(1 for e in events if "Memcpy DtoH" in e.name)
        rows.append(
            {
                "heads": nh,
                "aten_ops_per_layer": len(top) / 2,
                "blocks_per_layer": cap.blocks_per_layer,
                "host_copies": cap.host_copies,
                "memcpy_dtoh": copies,
            }
        )
    return rows


def _compiled_call(name: str) -> bool:
    """Whether a profiler event is a call into torch.compile's code (its name says so)."""
    return name.startswith("Torch-Compiled Region")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="gpt2-small:1024,smollm2:4096")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--accept", default=CHROMIUM_ACCEPTS, help="the request's Accept-Encoding")
    ap.add_argument("--compile", action="store_true", help="serve with ATTNSCOPE_COMPILE=1")
    ap.add_argument("--ops", action="store_true")
    ap.add_argument("--profile", action="store_true", help="where each case's request spends its time")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    results: dict = {"device": args.device, "threads": args.threads, "cases": [], "ops": []}
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            if not case:
                continue
            name, T = case.split(":")
            r = bench_case(name, int(T), args.repeat, args.threads, args.device, Path(tmp), args.accept, args.compile)
            results["cases"].append(r)
            print(
                f"{r['model']:>11} T={r['T']:>5}  bare {r['ms']['bare']:>9.0f} ms ({r['bare_kind']})  "
                f"page over HTTP {r['ms']['page']:>9.0f} ms = {r['ratio']:.2f}× bare  "
                f"{r['wire_bytes'] / 1e6:.2f} MB on the wire  server peak +{r['server_peak_growth_mib']:.0f} MiB",
                flush=True,
            )
            print("             server: " + ", ".join(f"{k} {v:.0f} ms" for k, v in r["server_ms"].items()))
            if args.profile:
                profile_case(name, int(T), args.device, Path(tmp))
    if args.ops:
        results["ops"] = ops_per_layer(args.device, args.compile)
        for row in results["ops"]:
            print(
                f"heads {row['heads']:>2}: {row['aten_ops_per_layer']:.0f} torch ops per layer, "
                f"blocks per layer {row['blocks_per_layer']}, host copies {row['host_copies']}, "
                f"Memcpy DtoH {row['memcpy_dtoh']}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
