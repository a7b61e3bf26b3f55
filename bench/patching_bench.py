"""Activation patching benchmark: every head, and every (block, position) of the residual stream.

    python bench/patching_bench.py [--device cpu|cuda] [--threads 2] [--tokens 64] [--repeats 3]

A GPT-2-small-shaped model (12 layers × 12 heads, d_model 768, vocab 50257, random weights: timings do
not depend on them) and two random texts of ``--tokens`` tokens; the logit difference read at the last
position. Printed: one forward pass (the baseline), patching all 144 heads as
:func:`model.causal.patching.patching` runs them (batched rows: on a CPU each layer's rows starting from
the corrupt stream entering it, on a GPU rows of every layer in whole passes) and the other way, in the
same process, and patching the residual stream after each of the 12 blocks at each position (12 × T
rows). Numbers are per machine and per load: note what else was running.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from attnscope.model.backends import OursBackend
from attnscope.model.causal import patching as patching_module
from attnscope.model.causal.patching import patching
from attnscope.model.options import AttentionOptions
from attnscope.model.ours.gpt import GPT, GPTConfig


def gpt2_small_backend(device: str) -> OursBackend:
    config = GPTConfig(block_size=1024, vocab_size=50257, n_layer=12, n_head=12, n_embd=768, name="gpt2-small-shaped")
    torch.manual_seed(0)
    return OursBackend(GPT(config).eval(), tokenizer=None, device=torch.device(device))


def timed(fn, repeats: int, device: str) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    backend = gpt2_small_backend(args.device)
    g = torch.Generator().manual_seed(1)
    clean = torch.randint(0, 50257, (args.tokens,), generator=g).tolist()
    corrupt = torch.randint(0, 50257, (args.tokens,), generator=g).tolist()
    T = args.tokens
    idx = torch.tensor([corrupt])
    one = timed(lambda: backend.last_logits(idx, AttentionOptions()), args.repeats, args.device)
    heads = timed(lambda: patching(backend, clean, corrupt, T - 1, 1, 2, "heads"), args.repeats, args.device)
    residual = timed(lambda: patching(backend, clean, corrupt, T - 1, 1, 2, "residual"), args.repeats, args.device)
    # the other way of batching the rows, in the same process: resumed from their layer <-> whole passes
    resumed = patching_module.resumes(backend)
    default_way = patching_module.resumes
    patching_module.resumes = lambda backend: not resumed
    try:
        other = timed(lambda: patching(backend, clean, corrupt, T - 1, 1, 2, "heads"), args.repeats, args.device)
    finally:
        patching_module.resumes = default_way
    ways = ("each layer's rows from the stream entering it", "rows of every layer in whole passes")
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {args.threads} threads"
    print(f"GPT-2-small-shaped (12 × 12), {T} tokens, {name}, median of {args.repeats}")
    print(f"  one forward pass                        {one * 1000:9.1f} ms")
    print(f"  patching all 144 heads                  {heads * 1000:9.1f} ms  ({heads / one:5.1f} forward passes)")
    print(f"    (the default here: {ways[not resumed]}; {ways[resumed]}: {other * 1000:.1f} ms, {other / one:.1f})")
    print(
        f"  patching residual, 12 blocks × {T:>3} pos. {residual * 1000:9.1f} ms"
        f"  ({residual / one:5.1f} forward passes)"
    )


if __name__ == "__main__":
    main()
