"""The Jacobian lens's fit: prompts a second, against the forward pass it starts from; printed.

    python bench/jlens_bench.py [--cases shipped,smollm2] [--prompts 8] [--seq-len 128] [--dim-batch 32]
                                [--threads 2] [--device cpu|cuda] [--json OUT.json]

Models: ``shipped`` (our trained 4 layers x 4 heads, d 128) and ``smollm2`` (a random Llama of
SmolLM2-135M's shape: 30 layers, d 576, 9 heads over 3 key/value heads, built here from its
transformers config with the shipped tokenizer's vocabulary). The corpus is the seeded English-like
text of bench/atlas_bench.py, a document a paragraph. For each case, in one process:

* ``forward``: one prompt's batch of ``--dim-batch`` copies through the blocks (what a prompt's fit
  starts with), the best of three;
* ``fit``: ``attnscope.model.jlens.build.fit_lens`` over ``--prompts`` prompts (one forward and
  ceil(d_model / dim_batch) backward passes each), wall time and prompts/s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO.parent))  # `import attnscope` from a checkout that is not installed
sys.path.insert(0, str(REPO))


def smollm2(root: Path, vocab_size: int):
    """A random Llama of SmolLM2-135M's shape, saved with the shipped tokenizer, loaded by attnscope."""
    from attnscope.model.registry import load_model
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                      tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(root / "smollm2")
    shipped = load_model(None, "cpu")
    shipped.tokenizer.tk.save(str(root / "smollm2" / "tokenizer.json"))
    (root / "smollm2" / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return load_model(root / "smollm2", "cpu")


def bench(lm, corpus, out: Path, args) -> dict:
    from attnscope.model.jlens.build import fit_lens
    from attnscope.model.jlens.fit import block_outputs_with_grad

    d = lm.facts.d_model
    nb = min(args.dim_batch, d)
    idx = torch.randint(0, lm.facts.vocab_size, (nb, args.seq_len), device=lm.device)
    forward = []
    for _ in range(3):
        t0 = time.perf_counter()
        block_outputs_with_grad(lm.backend, idx)
        forward.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    fit_lens(lm, corpus, out, seq_len=args.seq_len, skip_first=16, max_prompts=args.prompts,
             dim_batch=args.dim_batch, progress=False)
    wall = time.perf_counter() - t0
    return {"d_model": d, "layers": lm.facts.n_layer, "backward_passes": math.ceil(d / nb),
            "forward_s": round(min(forward), 4), "fit_s": round(wall, 2),
            "prompts_per_s": round(args.prompts / wall, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="shipped,smollm2")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--dim-batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from attnscope.model.atlas.corpus import open_corpus
    from attnscope.model.registry import load_model

    from bench.atlas_bench import write_corpus

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        corpus = open_corpus([write_corpus(root / "corpus.txt", args.prompts * args.seq_len * 3)])
        for case in args.cases.split(","):
            lm = load_model(None, args.device) if case == "shipped" else smollm2(root, 4096)
            if args.device != "cpu":
                lm.backend.model.to(args.device)
                lm.backend.device = torch.device(args.device)
            results[case] = got = bench(lm, corpus, root / f"{case}.pt", args)
            print(f"{case:8s} d {got['d_model']:4d} x {got['layers']:2d} layers, {got['backward_passes']:2d} backward "
                  f"passes a prompt: forward of {args.dim_batch} x {args.seq_len} {got['forward_s'] * 1000:8.1f} ms; "
                  f"fit {got['fit_s']:7.2f} s for {args.prompts} prompts = {got['prompts_per_s']:.3f} prompts/s")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "results": results}, indent=1))


if __name__ == "__main__":
    main()
