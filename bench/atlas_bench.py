"""The head atlas against a bare batched forward pass of the same model and batch shape; printed.

    python bench/atlas_bench.py [--cases shipped,gpt2-small] [--tokens 100000] [--batch-size 8]
                                [--threads 2] [--device cpu|cuda] [--memory 1000000,4000000] [--ray] [--before layout]
                                [--json OUT.json]

Models: ``shipped`` (our trained 4 layers x 4 heads, 256-token context, windows of 256) and
``gpt2-small`` (12 layers x 12 heads, d 768, random weights, our 4096-token vocabulary, windows of
512), both run by our GPT on ``--device`` (the CPU by default). The corpus is generated
English-like text (seeded), written to a temporary .txt file. For each case, in one process:

* ``bare``: the model's own forward pass, the fused attention kernel and the logits
  (``GPT.forward``, what a script that wants no attention runs), on ``--batch-size`` windows;
  ``trunk``: the same without the LM head (the atlas needs no logits);
* ``atlas``: one batch's atlas work (:func:`model.atlas.tally.batch_tally`: the explicit attention path
  into the blockwise sink, the batch's tally on the host) on the same batches, timed alternately
  with ``bare`` (the best of ``--repeat`` rounds of each), and its ratio of tokens/s to ``bare``;
  ``before``, with ``--before``: the same with cuts of ``bench/capture_ab.py`` undone, in the same rounds;
* ``end to end``: ``attnscope.atlas()`` on ``--tokens`` tokens of the corpus (reading, tokenizing,
  the induction probe, writing the Parquet files): wall time and tokens/s.

``--memory N1,N2`` runs the end-to-end atlas of N1 and of N2 tokens in child processes and prints
each one's peak resident memory (``ru_maxrss``), which must not grow with the corpus. ``--ray``
runs the end-to-end job again through the Ray engine on a local Ray of ``--threads`` CPUs (its
start-up timed apart) and prints its wall time against the local engine's.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
WINDOWS = {"shipped": 256, "gpt2-small": 512}
SENTENCES = (
    "the a cat dog sat on mat log she told her brother that train would leave at noon so they packed early",
    "open settings window choose network and switch connection off small ran across park chased ball children",
    "had thrown red opens old door when rain stopped went outside played until dinner was ready he wrote letter",
    "twice because first copy mistake in address numbers letters people time year way day man thing woman life",
)
WORDS = [w for s in SENTENCES for w in s.split()]


def write_corpus(path: Path, tokens: int, seed: int = 0) -> Path:
    """About ``tokens`` tokens (5 characters a token, generously) of seeded sentences, a paragraph per 6."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        written = 0
        while written < tokens * 5:
            sentences = []
            for _ in range(6):
                words = [rng.choice(WORDS) for _ in range(rng.randint(6, 16))]
                sentences.append(" ".join(words).capitalize() + rng.choice(".?!"))
            para = " ".join(sentences) + "\n\n"
            f.write(para)
            written += len(para)
    return path


def open_case(name: str, root: Path, device: str = "cpu"):
    """The loaded model of a case (gpt2-small: random weights saved as our checkpoint first)."""
    from attnscope.model.ours.checkpoint import SHIPPED, save_checkpoint
    from attnscope.model.ours.gpt import GPT, GPTConfig
    from attnscope.model.ours.tokenizer import BPETokenizer
    from attnscope.model.registry import load_model

    if name == "shipped":
        return load_model(None, device)
    tok = BPETokenizer.load(SHIPPED / "tokenizer.json")
    cfg = GPTConfig(block_size=1024, vocab_size=tok.vocab_size, n_layer=12, n_head=12, n_embd=768, name=name)
    torch.manual_seed(0)
    path = save_checkpoint(GPT(cfg), tok, root / name)
    return load_model(path, device)


def first_batches(lm, corpus: Path, seq_len: int, batch_size: int, n: int):
    from attnscope.model.atlas.corpus import batches, open_corpus, token_stream, windows

    out = []
    for b in batches(windows(token_stream(open_corpus([corpus]).documents(), lm.tokenizer), seq_len), batch_size):
        if b.ids.shape != (batch_size, seq_len):
            break
        out.append(b)
        if len(out) == n:
            break
    return out


def per_batch(lm, batches, repeat: int, before: str = "") -> dict:
    """Seconds per batch, best of ``repeat`` rounds, bare / trunk / atlas timed alternately; with ``before``
    (cuts of ``bench/capture_ab.py``), also ``before``: the atlas with those cuts undone."""
    from attnscope.model.atlas.tally import batch_tally

    best = {"bare": float("inf"), "trunk": float("inf"), "atlas": float("inf")}
    device = lm.backend.device
    runs = {
        "bare": lambda b: lm.model(torch.from_numpy(b.ids).to(device)),
        "trunk": lambda b: lm.model.hidden_states(torch.from_numpy(b.ids).to(device)),
        "atlas": lambda b: batch_tally(lm.backend, b, 8, 8),
    }
    if before:
        from capture_ab import CUTS, undone

        cuts = [c for name in before.split(",") for c in CUTS[name]()]

        def undone_tally(b):
            with undone(cuts):
                return batch_tally(lm.backend, b, 8, 8)

        runs["before"] = undone_tally
        best["before"] = float("inf")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    with torch.inference_mode():
        for run in runs.values():
            run(batches[0])  # warm-up
        for _ in range(repeat):
            for name, run in runs.items():
                sync()
                started = time.perf_counter()
                for b in batches:
                    run(b)
                sync()
                best[name] = min(best[name], (time.perf_counter() - started) / len(batches))
    return best


def end_to_end(lm, corpus: Path, out: Path, seq_len: int, batch_size: int, tokens: int, engine: str = "local") -> dict:
    from attnscope.model.atlas.build import atlas

    started = time.perf_counter()
    atlas(corpus, out, model=lm, seq_len=seq_len, batch_size=batch_size, max_tokens=tokens, progress=False,
          engine=engine)
    wall = time.perf_counter() - started
    seen = json.loads((out / "meta.json").read_text())["tokens_seen"]
    return {"tokens": seen, "wall_s": wall, "tokens_per_s": seen / wall}


def child_memory(case: str, tokens: int, batch_size: int, threads: int) -> None:
    """In a child process: the end-to-end atlas of ``tokens`` tokens, then its peak RSS as JSON."""
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lm = open_case(case, root)
        corpus = write_corpus(root / "corpus.txt", tokens)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = end_to_end(lm, corpus, root / "atlas", WINDOWS[case], batch_size, tokens)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(result | {"rss_before_mib": before / 1024, "peak_rss_mib": peak / 1024}))


def bench_case(name: str, args, root: Path) -> dict:
    seq_len = WINDOWS[name]
    lm = open_case(name, root, args.device)
    corpus = write_corpus(root / f"{name}.txt", max(args.tokens, seq_len * args.batch_size * args.batches) + 4096)
    batches = first_batches(lm, corpus, seq_len, args.batch_size, args.batches)
    times = per_batch(lm, batches, args.repeat, args.before)
    tok = args.batch_size * seq_len
    rates = {k: tok / v for k, v in times.items()}
    print(f"\n{name}: {lm.facts.n_layer} layers x {lm.facts.n_head} heads, batches of {args.batch_size} x {seq_len} "
          f"tokens, on {lm.backend.device}, {torch.get_num_threads()} threads")
    for k in times:
        print(f"  {k:<6} {1000 * times[k]:9.1f} ms/batch {rates[k]:11.0f} tokens/s")
    ratio = rates["atlas"] / rates["bare"]
    print(f"  atlas / bare {ratio:.2f}   atlas / trunk {rates['atlas'] / rates['trunk']:.2f}")
    if "before" in rates:
        print(f"  before ({args.before} undone) / bare {rates['before'] / rates['bare']:.2f}")
    result = {"case": name, "seq_len": seq_len, "batch_size": args.batch_size, "per_batch_s": times,
              "tokens_per_s": rates, "atlas_over_bare": ratio}
    e2e = end_to_end(lm, corpus, root / f"{name}-atlas", seq_len, args.batch_size, args.tokens)
    print(f"  end to end: {e2e['tokens']} tokens in {e2e['wall_s']:.1f} s, {e2e['tokens_per_s']:.0f} tokens/s")
    result["end_to_end"] = e2e
    if args.ray:
        result["ray"] = bench_ray(lm, corpus, root / f"{name}-ray", seq_len, args, e2e)
    if args.memory:
        result["memory"] = []
        for n in args.memory:
            cmd = [sys.executable, __file__, "--child", name, str(n), "--batch-size", str(args.batch_size),
                   "--threads", str(args.threads)]
            line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            mem = json.loads(line)
            print(f"  memory: {mem['tokens']:>9} tokens: peak RSS {mem['peak_rss_mib']:.0f} MiB "
                  f"({mem['tokens_per_s']:.0f} tokens/s)")
            result["memory"].append(mem)
        peaks = [m["peak_rss_mib"] for m in result["memory"]]
        print(f"  memory: largest / smallest peak RSS {max(peaks) / min(peaks):.3f}")
    return result


def bench_ray(lm, corpus: Path, out: Path, seq_len: int, args, local: dict) -> dict:
    import ray

    started = time.perf_counter()
    ray.init(num_cpus=args.threads, include_dashboard=False, log_to_driver=False)
    start_s = time.perf_counter() - started
    try:
        e2e = end_to_end(lm, corpus, out, seq_len, args.batch_size, args.tokens, engine="ray")
    finally:
        ray.shutdown()
    print(f"  ray: start {start_s:.1f} s, then {e2e['tokens']} tokens in {e2e['wall_s']:.1f} s "
          f"({e2e['tokens_per_s']:.0f} tokens/s); local {local['wall_s']:.1f} s: ray / local wall "
          f"{e2e['wall_s'] / local['wall_s']:.2f}")
    return e2e | {"start_s": start_s}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="shipped,gpt2-small")
    ap.add_argument("--tokens", type=int, default=100_000, help="tokens of the end-to-end runs")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--batches", type=int, default=4, help="batches timed per round")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument(
        "--memory", type=lambda s: [int(x) for x in s.split(",")], help="token counts, e.g. 1000000,4000000"
    )
    ap.add_argument("--ray", action="store_true")
    ap.add_argument("--before", default="", help="also time the atlas with these cuts of capture_ab.py undone")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "TOKENS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child_memory(args.child[0], int(args.child[1]), args.batch_size, args.threads)
        return
    torch.set_num_threads(args.threads)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases.split(","):
            results.append(bench_case(name, args, Path(tmp)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
