"""A hybrid's implicit heads against the bare forward pass, on the CPU; printed.

    python bench/implicit_bench.py [--tokens 1024,4096] [--threads 1] [--hidden 1024]

The model is random weights of Qwen3-Next's shape, cut to 8 layers (Gated DeltaNet in layers 0-2 and
4-6, full attention in 3 and 7), each Gated DeltaNet layer 16 key and 16 value heads of 128, built from
its transformers config into a temporary folder (no download); ``--hidden`` sets the model width (its
MLP a small mixture of experts). For each length it measures, one torch thread unless told:

* ``bare``: transformers' own forward pass on the same weights and tokens (eager, no attentions kept);
* ``grid``: what the page's grid asks for on this model, every softmax and implicit layer as 64 × 64
  thumbnails with statistics (the route's own computation, in this process): the forward pass, the
  softmax heads' capture and every implicit layer's M a chunk of rows at a time;
* ``M``: one Gated DeltaNet layer's M alone (its scan recorded once), thumbnails and statistics.

The target (issue 45): ``grid`` within 3× ``bare`` at 4,096 tokens.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import attnscope  # noqa: E402
from attnscope.app.compute.attention import answer_arrays  # noqa: E402
from attnscope.app.notebook.service import service_for  # noqa: E402
from attnscope.app.schemas.attention import AttentionRequest  # noqa: E402
from attnscope.app.schemas.subject import with_text_limit  # noqa: E402
from attnscope.app.subject import subject_of  # noqa: E402
from attnscope.model.families.implicit import recording_scans  # noqa: E402
from attnscope.model.families.implicit_layer import implicit_layer  # noqa: E402

from tests.kit.family import random_download  # noqa: E402

PARAGRAPH = (
    "A package manager keeps track of every file that a program installs, so that the program can be "
    "upgraded or removed cleanly later. When you ask it to install a package, it reads the list of "
    "dependencies, works out which other packages are missing and downloads them from the mirrors. "
)


def config(hidden: int) -> dict:
    """Qwen3-Next's layer pattern and linear heads, 8 layers, a small mixture of experts."""
    return dict(
        num_hidden_layers=8,
        hidden_size=hidden,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=16,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        full_attention_interval=4,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=256,
        shared_expert_intermediate_size=256,
        intermediate_size=1024,
        max_position_embeddings=8192,
    )


def text_of(lm, n: int) -> str:
    """A text of about ``n`` tokens for ``lm``'s tokenizer."""
    ids = lm.tokenizer.encode_ids(PARAGRAPH * (n // 40 + 2))[:n]
    return lm.tokenizer.decode(ids)


def timed(fn, *args, **kwargs) -> float:
    t0 = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="1024,4096")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=1024)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        path = random_download(Path(tmp) / "qwen3_next", "qwen3_next", **config(args.hidden))
        lm = attnscope.load_model(path)
        svc = service_for(lm)
        bare = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
        info = lm.facts
        implicit = [i for i, about in enumerate(info.layers) if about.get("implicit")]
        every = sorted([*info.attention_layers, *implicit])
        print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s)")
        print(f"model: 8 layers, hidden {args.hidden}, Gated DeltaNet layers {implicit} (16 heads × 128)")
        print(f"{'tokens':>7} {'bare s':>8} {'grid s':>8} {'grid/bare':>9} {'M s':>7}")
        for n in (int(v) for v in args.tokens.split(",")):
            text = text_of(lm, n)
            ids = torch.tensor([lm.tokenizer.encode_ids(text)])
            with torch.inference_mode():
                t_bare = timed(bare, ids)
            asked = with_text_limit(AttentionRequest, 1 << 20)  # as a server started with a larger text limit
            body = asked(text=text, layers=every, include=["stats"], thumbnail=64, stats_rows=False, top_k=0)
            t_grid = timed(lambda body=body: answer_arrays(svc, body, subject_of(svc, body)))
            with torch.inference_mode(), recording_scans(bare) as scans:
                bare(ids)
            scan = scans[implicit[0]]
            t_m = timed(implicit_layer, scan, 96 << 20, pattern=False, thumbnail=64, stats=True)
            print(f"{ids.shape[1]:>7} {t_bare:>8.2f} {t_grid:>8.2f} {t_grid / t_bare:>9.2f} {t_m:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
