"""The compact wire format and the models people study: sizes and times, printed.

    python bench/wire_bench.py [--model shipped|gpt2-small|both] [--lengths 64,256,1024] [--repeat 5]
                               [--threads 2] [--device cpu|cuda] [--json OUT.json]

``gpt2-small`` is a GPT-2-small-shaped random model (12 layers × 12 heads, d 768, context
1024) built from a transformers config and saved to a temporary folder: no download. It
opens in our GPT, as any plain GPT-2 does; ``gpt2-small-tf`` is the same shape run through
the transformers backend. Per
length T it measures, in this process, with the same threads, interleaved round by round:

* ``bare``: transformers' eager forward with ``output_attentions=True`` (same weights; for
  the shipped model its GPT-2 export), the number the targets are judged against;
* ``plain``: ``bare`` + ``json.dumps`` of every attention ``.tolist()`` + gzip, what a
  script would send without attnscope;
* the service's own requests (``app.compute.attention.attention_json``, what the route runs), each
  with its gzip size (level 1, as the server):
  ``grid`` = every head's 64×64 thumbnail + statistics, b64, no predictions (the page's grid);
  ``grid+head`` = the same plus one focus head's pattern in full (f4, or f2 from T = 512)
  and five predictions (the page's one request per keystroke);
  ``head`` = one head, every field, five predictions, b64;
  ``json-grid`` = every head's full pattern + stats as plain JSON (the old grid request).

Also the peak resident memory a ``grid+head`` request adds: in a fresh child process, the
resident set sampled every millisecond during the request, minus what it was after the
model loaded and answered a two-token request. Ratios printed against the targets of issues 9 and 10.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from api_bench import PARAGRAPH  # noqa: E402
from attnscope.app.compute.attention import attention_json  # noqa: E402
from attnscope.app.schemas.attention import AttentionRequest  # noqa: E402
from attnscope.app.service import build_service  # noqa: E402
from attnscope.app.subject import subject_of  # noqa: E402
from attnscope.model.ours.checkpoint import SHIPPED  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from capture_bench import SHAPES  # noqa: E402

from tests.kit.family import random_download  # noqa: E402

GZIP_LEVEL = 1
PAGE = os.sysconf("SC_PAGE_SIZE")


def gpt2_small(out: Path, through_transformers: bool = False) -> Path:
    """A random GPT-2-small-shaped model and our tokenizer, saved like a download.

    A plain GPT-2 opens in our own GPT (the registry converts it); ``through_transformers``
    sets ``scale_attn_by_inverse_layer_idx``, which only transformers runs, to time that path."""
    return random_download(out, **SHAPES["gpt2-small"], scale_attn_by_inverse_layer_idx=through_transformers)


def shipped_as_hf(out: Path) -> Path:
    from attnscope.model.ours.gpt2_format import export_hf

    lm = load_model(SHIPPED, "cpu")
    return export_hf(lm.model, lm.tokenizer, out)


def ids_of(tokenizer, n: int) -> list[int]:
    ids = tokenizer.encode_ids(PARAGRAPH * (1 + n // 40))
    return ids[:n]


def views(T: int, n_layer: int, n_head: int) -> dict[str, dict]:
    focus_dtype = "f2" if T >= 512 else "f4"
    focus = {"layer": n_layer // 2, "head": n_head // 2, "include": ["pattern"]}
    return {
        "grid": dict(include=["stats"], stats_rows=False, thumbnail=64, encoding="b64", top_k=0),
        "grid+head": dict(
            include=["stats"],
            stats_rows=False,
            thumbnail=64,
            focus=focus,
            encoding="b64",
            precision=focus_dtype,
            top_k=5,
        ),
        "head": dict(
            layers=[n_layer // 2],
            heads=[n_head // 2],
            include=["pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled", "stats", "q", "k", "v"],
            encoding="b64",
            top_k=5,
        ),
        "json-grid": dict(include=["pattern", "stats"], top_k=0),
    }


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000, out


def _rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE / 2**20


def _request_rss(path: str, device: str, threads: int, text: str, body: dict, q) -> None:
    from attnscope.app.lifespan import limit_heap_retention

    limit_heap_retention()  # as the server does at startup
    torch.set_num_threads(threads)
    svc = build_service(load_model(path, device), with_heads=False)
    req = AttentionRequest(text=text, **body)
    warm = AttentionRequest(text="warm up", include=[])
    attention_json(svc, warm, subject_of(svc, warm))
    before, peak, running = _rss_mb(), [0.0], [True]

    def sample() -> None:  # the resident set, every millisecond, while the requests run
        while running[0]:
            peak[0] = max(peak[0], _rss_mb())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    for _ in range(2):
        attention_json(svc, req, subject_of(svc, req))
    running[0] = False
    sampler.join()
    q.put(peak[0] - before)


def request_memory_mb(path: Path, device: str, threads: int, text: str, body: dict) -> float:
    """Peak RSS growth (MiB) of a fresh process serving ``body`` after a warm-up request."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_request_rss, args=(str(path), device, threads, text, body, q))
    p.start()
    p.join()
    return q.get() if not q.empty() else float("nan")


def bench_model(
    name: str, path: Path, hf_path: Path, lengths: list[int], repeat: int, device: str, threads: int
) -> dict:
    from transformers import AutoModelForCausalLM

    lm = load_model(path, device)
    svc = build_service(lm, with_heads=False)
    ref = AutoModelForCausalLM.from_pretrained(hf_path, attn_implementation="eager").to(device).eval()
    facts = lm.facts
    results = {"model": name, "shape": f"{facts.n_layer}x{facts.n_head}, d{facts.d_model}", "lengths": {}}
    for T in lengths:
        if T > facts.block_size:
            continue
        ids = ids_of(lm.tokenizer, T)
        text = lm.tokenizer.decode(ids)
        T_real = len(lm.tokenizer.encode(text).ids)
        reqs = {k: AttentionRequest(text=text, **v) for k, v in views(T_real, facts.n_layer, facts.n_head).items()}
        idx = torch.tensor([lm.tokenizer.encode(text).ids], device=device)

        def bare(idx=idx):
            with torch.inference_mode():
                out = ref(idx, output_attentions=True)
            if device == "cuda":
                torch.cuda.synchronize()
            return out

        def plain(bare=bare):
            out = bare()
            body = json.dumps([a[0].tolist() for a in out.attentions]).encode()
            return gzip.compress(body, GZIP_LEVEL)

        times: dict[str, list[float]] = {k: [] for k in ["bare", "plain", *reqs]}
        sizes: dict[str, tuple[int, int]] = {}
        for rnd in range(repeat + 1):  # round 0 warms up
            ms, _ = timed(bare)
            if rnd:
                times["bare"].append(ms)
            if T_real <= 256 or rnd < 2:  # the plain approach at 1024 tokens takes many seconds
                ms, gz = timed(plain)
                if rnd:
                    times["plain"].append(ms)
                sizes["plain"] = (-1, len(gz))
            for view, req in reqs.items():
                if view == "json-grid" and T_real > 256 and rnd > 1:
                    continue
                ms, (body, timings) = timed(lambda req=req: attention_json(svc, req, subject_of(svc, req)))
                if rnd:
                    times[view].append(timings["total"])
                sizes[view] = (len(body), len(gzip.compress(body, GZIP_LEVEL)))
        med = {k: float(np.median(v)) for k, v in times.items() if v}
        mem = request_memory_mb(path, device, threads, text, views(T_real, facts.n_layer, facts.n_head)["grid+head"])
        results["lengths"][T_real] = {"ms": med, "bytes": sizes, "grid+head_rss_mb": mem}
    return results


def report(all_results: list[dict]) -> None:
    for res in all_results:
        print(f"\n== {res['model']} ({res['shape']}), torch threads {torch.get_num_threads()}")
        print(f"{'T':>5} {'view':>10} {'ms':>9} {'x bare':>7} {'x plain':>8} {'bytes':>11} {'gzip':>10}")
        for T, r in res["lengths"].items():
            ms, sizes = r["ms"], r["bytes"]
            for view in ["bare", "plain", "grid", "grid+head", "head", "json-grid"]:
                if view not in ms:
                    continue
                raw, gz = sizes.get(view, (-1, -1))
                xb = ms[view] / ms["bare"]
                xp = ms[view] / ms["plain"] if "plain" in ms else float("nan")
                raw_s = f"{raw:,}" if raw >= 0 else "-"
                gz_s = f"{gz:,}" if gz >= 0 else "-"
                print(f"{T:>5} {view:>10} {ms[view]:>9.1f} {xb:>7.2f} {xp:>8.3f} {raw_s:>11} {gz_s:>10}")
            print(f"{T:>5} {'memory':>10} grid+head request adds {r['grid+head_rss_mb']:.0f} MiB peak RSS")


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["shipped", "gpt2-small", "gpt2-small-tf", "both"], default="both")
    ap.add_argument("--lengths", default="64,256,1024")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    lengths = [int(x) for x in args.lengths.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.model in ("shipped", "both"):
            hf = shipped_as_hf(tmp / "shipped-hf")
            results.append(bench_model("shipped", SHIPPED, hf, lengths, args.repeat, args.device, args.threads))
        if args.model in ("gpt2-small", "both"):
            path = gpt2_small(tmp / "gpt2-small")
            results.append(bench_model("gpt2-small", path, path, lengths, args.repeat, args.device, args.threads))
        if args.model == "gpt2-small-tf":
            path = gpt2_small(tmp / "gpt2-small-tf", through_transformers=True)
            results.append(bench_model("gpt2-small-tf", path, path, lengths, args.repeat, args.device, args.threads))
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
