"""The page's request before and after a cut, side by side in one process, over the bare SDPA forward.

    nice -n 19 python bench/capture_ab.py [--case smollm2:4096|vlm|gpt2-small:1024] [--rounds 4] [--threads 1]
                                          [--cuts layout,stats]

For a machine shared with other jobs: a ratio of two things run alternately in one process (A B A B ...,
the order flipped each round) holds where a time alone does not. Each round times, in CPU seconds of the
calling thread (``time.thread_time``):

* ``before``: the page's request as :func:`attnscope.app.compute.attention.attention_json` computes it, with
  the cuts of :data:`CUTS` named by ``--cuts`` undone (each a name modules import, put back to what it was:
  ``layout`` the keys and values head by head, ``stats`` the statistics' accumulator of ``model/stats.py`` at a286fd4);
* ``after``: the same request with the cuts in (this checkout);
* ``sdpa``: transformers' SDPA forward on the same weights and tokens, no attentions.

Cases: ``smollm2:T`` and ``gpt2-small:T`` (``bench/capture_bench.py``'s models and page request), and
``vlm`` (``bench/vlm_bench.py``'s LLaVA and 1,024-token image). Prints each round's after ÷ before,
before ÷ sdpa and after ÷ sdpa, and their spread.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def _layout_cut():
    """Issue 47, round two: each layer's keys and values laid out head by head before its blocks (``head_major``)."""
    from attnscope.model import families, ours
    from attnscope.model.families import deberta

    return [(m, "head_major", lambda x: x) for m in (families, deberta, ours.gpt)]


def _stats_cut(rev: str = "a286fd4"):
    """The statistics' passes (``model/stats.py``): the masked keys zeroed from the first one a block hides,
    and Σ p·y written into y. Before: the file at ``rev``, loaded beside this one."""
    import importlib.util
    import subprocess

    from attnscope.model import capture, focus

    source = subprocess.run(["git", "show", f"{rev}:model/stats.py"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout
    spec = importlib.util.spec_from_loader("attnscope.model._stats_before", loader=None)
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old
    exec(compile(source, f"{rev}:model/stats.py", "exec"), old.__dict__)
    return [(m, "StatsAccumulator", old.StatsAccumulator) for m in (capture, focus)]


CUTS = {"layout": _layout_cut, "stats": _stats_cut}  # each: the (module, name, value before) it changed


@contextlib.contextmanager
def undone(cuts):
    """Within the block, each cut's names hold what they held before it."""
    saved = [(m, name, getattr(m, name)) for m, name, _ in cuts]
    try:
        for m, name, before in cuts:
            setattr(m, name, before)
        yield
    finally:
        for m, name, value in saved:
            setattr(m, name, value)


def text_case(name: str, T: int, tmp: Path):
    """The request and SDPA forward of ``bench/capture_bench.py``'s model ``name`` at T tokens."""
    from attnscope.app.schemas.attention import AttentionRequest
    from attnscope.app.schemas.common import with_text_limit
    from capture_bench import SHAPES, build, page_request, text_of
    from transformers import AutoModelForCausalLM

    path = build(name, tmp / name)
    text, ids = text_of(T)
    shape = SHAPES[name]
    layers = shape.get("num_hidden_layers", shape.get("n_layer"))
    heads = shape.get("num_attention_heads", shape.get("n_head"))
    body = page_request(text, len(ids), layers, heads)
    req = with_text_limit(AttentionRequest, 200_000)(**body, stats_unscaled=False)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    idx = torch.tensor([ids])

    def sdpa():
        with torch.inference_mode():
            model(idx, logits_to_keep=1)

    return path, req, sdpa, f"{name} at {len(ids)} tokens"


def vlm_case(tmp: Path):
    """``bench/vlm_bench.py``'s LLaVA, its page request and its SDPA forward."""
    from attnscope.app.schemas.attention import AttentionRequest
    from attnscope.model.vision.images import decode_image
    from PIL import Image
    from transformers import AutoModelForImageTextToText
    from vlm_bench import QUESTION, VISION, build

    size = VISION["image_size"]
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    path = build(tmp / "llava")
    focus = {"layer": 18, "head": 8, "include": ["pattern", "attn_scores_raw", "stats"]}
    req = AttentionRequest(text=QUESTION, image=base64.b64encode(buf.getvalue()).decode(), include=["stats"],
                           stats_rows=False, stats_unscaled=False, thumbnail=64, focus=focus, encoding="b64", top_k=5)
    model = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="sdpa").eval()

    prompt: list = []  # the prepared prompt, made on the first call

    def sdpa():
        if not prompt:
            from attnscope.model.registry import load_model

            prompt.append(load_model(path, device="cpu").backend.prepare(QUESTION, decode_image(buf.getvalue(), 10**8)))
        with torch.inference_mode():
            model(input_ids=torch.tensor([prompt[0].ids]), **prompt[0].inputs)

    return path, req, sdpa, "LLaVA, CLIP 448/14, 36 × 16 heads over 2, 1,024 image tokens"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="smollm2:4096")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cuts", default=",".join(CUTS), help="which cuts 'before' undoes: " + ", ".join(CUTS))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from attnscope.app.compute.attention import attention_json
    from attnscope.app.lifespan import limit_heap_retention
    from attnscope.app.service import build_service
    from attnscope.model.registry import load_model

    limit_heap_retention()  # as the server does
    cuts = [c for name in args.cuts.split(",") for c in CUTS[name]()]
    with tempfile.TemporaryDirectory() as tmp:
        if args.case == "vlm":
            path, req, sdpa, title = vlm_case(Path(tmp))
        else:
            name, T = args.case.split(":")
            path, req, sdpa, title = text_case(name, int(T), Path(tmp))
        svc = build_service(load_model(path, device="cpu"), with_heads=False)

        def before():
            with undone(cuts):
                attention_json(svc, req)

        sides = {"before": before, "after": lambda: attention_json(svc, req), "sdpa": sdpa}
        times: dict[str, list[float]] = {n: [] for n in sides}
        for rnd in range(args.rounds + 1):
            order = list(sides) if rnd % 2 else list(sides)[::-1]
            for n in order:
                t = time.thread_time()
                sides[n]()
                if rnd:  # the first round warms up
                    times[n].append(time.thread_time() - t)
    ratios = {
        "after / before": [a / b for a, b in zip(times["after"], times["before"])],
        "before / sdpa": [a / b for a, b in zip(times["before"], times["sdpa"])],
        "after / sdpa": [a / b for a, b in zip(times["after"], times["sdpa"])],
    }
    print(f"{title}; before: {args.cuts} undone; {args.threads} torch thread(s), {args.rounds} rounds, CPU s of "
          "the calling thread")
    for n, ts in times.items():
        print(f"  {n:<7} median {statistics.median(ts):7.2f} s   rounds {' '.join(f'{t:.2f}' for t in ts)}")
    for n, rs in ratios.items():
        print(f"  {n:<15} median {statistics.median(rs):.2f}  ({min(rs):.2f}–{max(rs):.2f})")
    return {"times": times, "ratios": ratios}


if __name__ == "__main__":
    main()
