"""Model benchmarks: training throughput, inspection latency, checkpoint size.

    python bench/model_bench.py [--checkpoint DIR] [--threads 2] [--steps 6] [--repeats 20]

* training: tokens/s of a few AdamW steps of the "small" preset (4 layers × 4 heads,
  d_model 128, context 256, batch 16) on random tokens;
* inspection: median and 90th-percentile latency of ``inspect()`` + ``head_stats()`` at
  T = 16, 64, 128, 256 tokens, next to the plain fused forward pass for comparison;
* the checkpoint's size on disk.

Uses the shipped checkpoint (else ``runs/small/checkpoint``); without one, a random model of
the same configuration, so the timings still hold (they do not depend on the weights).
Numbers are per machine and per load: note what else was running.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attnscope.model.inspection import head_stats, inspect  # noqa: E402
from attnscope.model.ours.checkpoint import SHIPPED, save_checkpoint  # noqa: E402
from attnscope.model.ours.gpt import GPT, GPTConfig  # noqa: E402
from attnscope.model.ours.tokenizer import BPETokenizer  # noqa: E402
from attnscope.model.ours.train_config import PRESETS  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

LENGTHS = (16, 64, 128, 256)
FALLBACK = ROOT / "runs" / "small" / "checkpoint"
PARAGRAPH = (
    "The library opens at nine in the morning, and by ten the reading room is already full. "
    "A student by the window copies notes from a heavy book while her friend looks for a map of the old town. "
    "When the bell rings at noon, most of them leave for lunch, but a few stay behind to finish their work. "
    "Outside, the rain has stopped and the streets are shining in the afternoon light. "
)


def find_checkpoint(explicit: str | None) -> Path | None:
    if explicit:
        return Path(explicit)
    for candidate in (SHIPPED, FALLBACK):
        if (candidate / "model.safetensors").is_file():
            return candidate
    return None


def load_bench_model(path: Path | None) -> tuple[GPT, BPETokenizer, str]:
    if path is not None:
        lm = load_model(path, device="cpu")
        return lm.model, lm.tokenizer, str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    config = PRESETS["small"].model
    tok_file = ROOT / "runs" / "small" / "tokenizer.json"
    tokenizer = BPETokenizer.load(tok_file) if tok_file.is_file() else BPETokenizer.train([PARAGRAPH * 20], 512)
    torch.manual_seed(0)
    return GPT(config).eval(), tokenizer, "random model (no checkpoint found), small config"


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def text_of_length(tokenizer: BPETokenizer, T: int) -> tuple[str, int]:
    """A text of about ``T`` tokens (re-encoding a decoded prefix can merge differently)."""
    ids = tokenizer.encode_ids(PARAGRAPH * (T // 40 + 2))[:T]
    text = tokenizer.decode(ids)
    while len(tokenizer.encode_ids(text)) > T:
        ids = ids[:-1]
        text = tokenizer.decode(ids)
    return text, len(tokenizer.encode_ids(text))


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def bench_training(config: GPTConfig, batch_size: int, steps: int, warmup: int = 2) -> float:
    """Tokens/s of forward + backward + AdamW step on random tokens (timed after ``warmup`` steps)."""
    torch.manual_seed(0)
    model = GPT(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=PRESETS["small"].lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(0)
    T = config.block_size

    def step() -> None:
        batch = torch.randint(0, config.vocab_size, (batch_size, T + 1), generator=g)
        _, loss = model(batch[:, :-1], batch[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch_size * T / (time.perf_counter() - start)


@torch.inference_mode()
def bench_inspection(model: GPT, tokenizer: BPETokenizer, T: int, repeats: int) -> tuple[int, list[float], list[float]]:
    """(actual T, inspect + head_stats times, plain forward times), in seconds."""
    text, n = text_of_length(tokenizer, T)
    idx = torch.tensor([tokenizer.encode_ids(text)])
    head_stats(inspect(model, tokenizer, text))  # warm-up
    model(idx)
    traced, plain = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        head_stats(inspect(model, tokenizer, text))
        t1 = time.perf_counter()
        model(idx)
        t2 = time.perf_counter()
        traced.append(t1 - t0)
        plain.append(t2 - t1)
    return n, traced, plain


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", help="checkpoint directory (default: shipped, else runs/small/checkpoint)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6, help="timed training steps")
    ap.add_argument("--repeats", type=int, default=20, help="inspection runs per length")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    model, tokenizer, source = load_bench_model(find_checkpoint(args.checkpoint))
    cfg = model.config
    print(f"model      {source}")
    print(
        f"config     {cfg.n_layer} layers × {cfg.n_head} heads, d_model {cfg.n_embd}, head size {cfg.head_dim}, "
        f"context {cfg.block_size}, vocab {cfg.vocab_size}, {model.num_parameters():,} parameters"
    )
    print(f"torch      {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    print()

    small = PRESETS["small"]
    rate = bench_training(small.model, small.batch_size, args.steps)
    print(
        f"training   {rate:,.0f} tokens/s  (small preset, batch {small.batch_size} × {small.model.block_size}, "
        f"{args.steps} timed steps, random tokens)"
    )
    print()

    print(f"{'T':>5}  {'inspect+stats median':>21}  {'p90':>9}  {'forward median':>15}  {'p90':>9}")
    for T in LENGTHS:
        if T > cfg.block_size:
            continue
        n, traced, plain = bench_inspection(model, tokenizer, T, args.repeats)
        print(
            f"{n:>5}  {statistics.median(traced) * 1e3:>18.1f} ms  {percentile(traced, 90) * 1e3:>6.1f} ms"
            f"  {statistics.median(plain) * 1e3:>12.1f} ms  {percentile(plain, 90) * 1e3:>6.1f} ms"
        )
    print()

    path = find_checkpoint(args.checkpoint)
    if path is None:
        with tempfile.TemporaryDirectory() as tmp:
            size = dir_size(save_checkpoint(model, tokenizer, Path(tmp) / "ckpt"))
        where = "as it would be saved"
    else:
        size = dir_size(path)
        where = str(path.name)
    print(f"checkpoint {size / 2**20:.2f} MiB on disk ({where}; weights fp32, tied lm_head stored once)")


if __name__ == "__main__":
    main()
