"""Ablation benchmarks: head effects of every head, and generation with and without the cache.

    python bench/effects_bench.py [--threads 2] [--tokens 64] [--new-tokens 64] [--repeats 3]

* head effects: all 144 heads of a GPT-2-small-shaped model (12 layers × 12 heads, d_model
  768, vocab 50257, random weights: timings do not depend on them) for the last position of a
  64-token text, as :func:`model.ablation.head_effects` runs them (a few batched passes), next
  to the naive way (one forward pass per head, 145 passes);
* generation: tokens/s of greedy generation after a 64-token prompt with the key/value cache
  (each step one token's work) and without it (each step a full pass over the text so far),
  on the same model and on the shipped one.

Numbers are per machine and per load: note what else was running.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attnscope.model.ablation import Done, generate, head_effects  # noqa: E402
from attnscope.model.backends import OursBackend  # noqa: E402
from attnscope.model.ours.gpt import GPT, AttentionOptions, GPTConfig  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402


def gpt2_small_backend() -> OursBackend:
    config = GPTConfig(block_size=1024, vocab_size=50257, n_layer=12, n_head=12, n_embd=768, name="gpt2-small-shaped")
    torch.manual_seed(0)
    model = GPT(config).eval()
    return OursBackend(model, tokenizer=None, device=torch.device("cpu"))


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def naive_effects(backend, ids: list[int], position: int, token: int) -> torch.Tensor:
    """One forward pass per head (and one with none off): what head_effects saves."""
    f = backend.facts
    idx = torch.tensor([ids[: position + 1]])
    base = torch.log_softmax(backend.last_logits(idx, AttentionOptions())[0].double(), -1)[token]
    delta = torch.zeros(f.n_layer, f.n_head, dtype=torch.float64)
    for layer in range(f.n_layer):
        for h in range(f.n_head):
            logits = backend.last_logits(idx, AttentionOptions(ablate=frozenset({(layer, h)})))[0]
            delta[layer, h] = torch.log_softmax(logits.double(), -1)[token] - base
    return delta


@torch.inference_mode()
def uncached(backend, ids: list[int], n: int) -> list[int]:
    """Greedy without a cache: every step runs the whole text so far."""
    seq = list(ids)
    for _ in range(n):
        logits = backend.last_logits(torch.tensor([seq]), AttentionOptions())[0]
        seq.append(int(logits.argmax()))
    return seq[len(ids) :]


def cached(backend, ids: list[int], n: int) -> list[int]:
    out = [s for s in generate(backend, ids, n) if not isinstance(s, Done)]
    return [s.token_id for s in out]


def bench_generation(label: str, backend, ids: list[int], n: int, repeats: int) -> None:
    t_cache, a = timed(lambda: cached(backend, ids, n), repeats)
    t_full, b = timed(lambda: uncached(backend, ids, n), repeats)
    same = "same tokens" if a == b[: len(a)] else "TOKENS DIFFER"
    print(
        f"  {label}: {len(a)} tokens after a {len(ids)}-token prompt: with the cache {len(a) / t_cache:7.1f} tokens/s, "
        f"without {len(b) / t_full:7.1f} tokens/s ({t_full / t_cache:.1f}x; {same})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")

    backend = gpt2_small_backend()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 50257, (args.tokens,), generator=g).tolist()
    position = len(ids) - 1
    head_effects(backend, ids[:8], 7)  # warm up
    t_batched, eff = timed(lambda: head_effects(backend, ids, position), args.repeats)
    t_naive, naive = timed(lambda: naive_effects(backend, ids, position, eff.token_id), 1)
    diff = float((eff.delta - naive).abs().max())
    print(f"head effects, GPT-2-small shape (12 x 12 heads), {args.tokens} tokens, last position:")
    print(f"  batched (head_effects):   {t_batched * 1000:8.0f} ms for 144 heads")
    print(
        f"  one pass per head:        {t_naive * 1000:8.0f} ms"
        f" ({t_naive / t_batched:.1f}x slower; max |diff| {diff:.1e})"
    )

    print("generation (greedy):")
    bench_generation("GPT-2-small shape", backend, ids, args.new_tokens, 1)
    shipped = load_model(None, "cpu").backend
    text_ids = shipped.tokenizer.encode_ids(
        "The library opens at nine in the morning, and by ten the reading room is already full. "
        "A student by the window copies notes from a heavy book while her friend looks for a map."
    )
    bench_generation(
        f"shipped model ({shipped.facts.n_layer} x {shipped.facts.n_head})",
        shipped,
        text_ids,
        args.new_tokens,
        args.repeats,
    )


if __name__ == "__main__":
    main()
