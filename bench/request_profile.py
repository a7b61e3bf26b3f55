"""Where a request's fixed cost goes: POST /api/attention's stages timed in this process, and a profile.

    nice -n 19 python bench/request_profile.py [--checkpoint DIR] [--lengths 64,256] [--repeat 30] [--threads 2]
                                               [--views grid,head,json-grid] [--profile grid:256] [--top 25]

For each length and view (the page's grid body, its chosen-head body, the old plain-JSON grid), the
median of ``--repeat`` runs of each stage the route runs, in order, in one process:

* ``validate``: the body's bytes parsed and validated (``orjson.loads``, the route's request model);
* ``subject``: the text tokenised, displayed and checked (``app/subject.py`` ``subject_of``);
* ``plan``: the capture planned (``app/compute/plan.py`` ``plan_capture``);
* ``forward``: the model's forward pass with the capture as its sink, and ``finish``;
* ``predict``: the top guesses where asked;
* ``answer``: the answer laid out (``answer_of``);
* ``encode``: its bytes (``app/encoding.py`` ``encode_answer``);
* ``zstd``: what the compression middleware does to it for a browser;
* ``bare``: the model's own forward pass with no sink, for scale.

``--clock cpu`` (with ``--threads 1``) times each stage by this thread's CPU time instead of the wall
clock: on a machine shared with other work the wall clock counts their time too.

``--profile VIEW:T`` also prints cProfile's top functions (by own time) over the whole path of that one.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import zstandard  # noqa: E402
from api_bench import text_of  # noqa: E402
from attnscope.app.compression import ZSTD_LEVEL  # noqa: E402
from attnscope.app.compute import attention as compute  # noqa: E402
from attnscope.app.compute.plan import plan_capture  # noqa: E402
from attnscope.app.encoding import encode_answer  # noqa: E402
from attnscope.app.schemas.attention import AttentionRequest  # noqa: E402
from attnscope.app.schemas.subject import with_text_limit  # noqa: E402
from attnscope.app.service import build_service  # noqa: E402
from attnscope.app.subject import subject_of  # noqa: E402
from attnscope.model.capture import Capture  # noqa: E402
from attnscope.model.options import AttentionOptions  # noqa: E402
from attnscope.model.ours.checkpoint import SHIPPED  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

STAGES = ("validate", "subject", "plan", "forward", "predict", "answer", "encode", "zstd")


def bodies(text: str, n_layer: int) -> dict[str, dict]:
    """The page's two bodies for a short text (frontend/js/requests.js), the grid's with the unscaled
    statistics, and the old plain-JSON grid."""
    head = ["pattern", "pattern_unscaled", "attn_scores_raw", "attn_scores_uncapped", "attn_scores", "stats", "q", "k"]
    return {
        "grid": {"text": text, "include": ["stats"], "stats_rows": False, "stats_unscaled": False, "thumbnail": 64,
                 "encoding": "b64", "top_k": 0},
        "grid+u": {"text": text, "include": ["stats"], "stats_rows": False, "thumbnail": 64, "encoding": "b64",
                   "top_k": 0},  # the grid's body before it left the unscaled softmax out
        "head": {"text": text, "layers": [n_layer // 2], "heads": [0], "include": head, "encoding": "b64",
                 "precision": "f4", "top_k": 10},
        "json-grid": {"text": text, "include": ["pattern", "stats"], "top_k": 0},
    }


def staged(svc, model_cls, raw: bytes) -> tuple[dict[str, float], bytes]:
    """One request's stages, each timed (ms), as :func:`attention_json` runs them; and the encoded answer."""
    times, t = {}, CLOCK[0]()

    def lap(name: str) -> None:
        nonlocal t
        now = CLOCK[0]()
        times[name] = (now - t) * 1000
        t = now

    req = model_cls.model_validate(orjson.loads(raw))
    lap("validate")
    prompt = subject_of(svc, req)
    lap("subject")
    sel = plan_capture(svc, req, len(prompt.ids))
    lap("plan")
    capture = Capture(sel)
    opts = prompt.opts  # the request's what-ifs, resolved with its subject
    hidden = prompt.backend.hidden(prompt.ids, opts, capture)
    capture.finish()
    lap("forward")
    predictions = compute._predictions(svc, hidden, req.top_k, req.temperature) if req.top_k else [[]] * len(prompt.ids)
    lap("predict")
    result = compute.AttentionResult(
        tokens=prompt.tokens, token_ids=prompt.ids, offsets=prompt.offsets, stack=prompt.stack, causal=req.causal,
        divisor=capture.layers[0].divisor, sel=sel, capture=capture, predictions=predictions, adds=dict(prompt.adds),
    )
    answer = compute.answer_of(result, req, svc.loaded.facts)
    lap("answer")
    masks = [lc.mask for lc in capture.layers]
    body = b"".join(encode_answer(answer, req.precision, masks, capture.focus_mask))
    lap("encode")
    zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(body)
    lap("zstd")
    return times, body


CLOCK = [time.perf_counter]  # or time.thread_time (--clock cpu): this thread's CPU time, steadier under load


def bare_ms(svc, ids: list[int]) -> float:
    t = CLOCK[0]()
    with torch.inference_mode():
        svc.loaded.backend.hidden(ids, AttentionOptions(), None)
    return (CLOCK[0]() - t) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=SHIPPED)
    ap.add_argument("--lengths", default="64,256")
    ap.add_argument("--views", default="grid,grid+u,head,json-grid")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--profile", default=None, help="VIEW:T, profiled with cProfile")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="cpu: this thread's CPU time (1 thread)")
    args = ap.parse_args(argv)
    if args.clock == "cpu":
        if args.threads != 1:
            ap.error("--clock cpu counts this thread's time only: use it with --threads 1")
        CLOCK[0] = time.thread_time
    torch.set_num_threads(args.threads)
    from attnscope.app.lifespan import limit_heap_retention

    limit_heap_retention()
    lm = load_model(args.checkpoint, "cpu")
    svc = build_service(lm, with_heads=False)
    model_cls = with_text_limit(AttentionRequest, 200_000)
    names = args.views.split(",")
    shape = f"{lm.facts.n_layer} layers × {lm.facts.n_head} heads"
    print(f"{lm.facts.name}: {shape}; {args.threads} torch threads, {args.clock} ms")
    print(f"{'T':>5} {'view':<10}" + "".join(f"{s:>9}" for s in (*STAGES, "total", "bare")) + f"{'bytes':>11}")
    for T in (int(x) for x in args.lengths.split(",")):
        text = text_of(lm.tokenizer, T)
        ids = lm.tokenizer.encode_ids(text)
        raws = {n: orjson.dumps(b) for n, b in bodies(text, lm.facts.n_layer).items() if n in names}
        rows: dict[str, list[dict]] = {n: [] for n in raws}
        bare: list[float] = []
        for i in range(args.repeat + 3):  # each view and the bare pass in turn, round by round
            for n, raw in raws.items():
                times, body = staged(svc, model_cls, raw)
                if i >= 3:
                    rows[n].append(times | {"bytes": len(body)})
            if i >= 3:
                bare.append(bare_ms(svc, ids))
        for n, got in rows.items():
            med = {s: statistics.median(r[s] for r in got) for s in STAGES}
            total = statistics.median(sum(r[s] for s in STAGES) for r in got)
            cells = "".join(f"{med[s]:>9.2f}" for s in STAGES)
            print(f"{T:>5} {n:<10}{cells}{total:>9.2f}{statistics.median(bare):>9.2f}{got[-1]['bytes']:>11,}")
    if args.profile:
        view, T = args.profile.split(":")
        text = text_of(lm.tokenizer, int(T))
        raw = orjson.dumps(bodies(text, lm.facts.n_layer)[view])
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.repeat):
            staged(svc, model_cls, raw)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    np.set_printoptions()
    return 0


if __name__ == "__main__":
    sys.exit(main())
