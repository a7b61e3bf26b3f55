"""Memory of an image-text model's attention: the page's request against eager ``output_attentions``; printed.

    python bench/vision_bench.py [--size 896] [--threads 2]

The model has Qwen2.5-VL-3B's attention shape (36 layers × 16 query heads over 2 key/value heads,
head size 16 instead of 128, a model width of 256, random weights, built here; no download), so its
attention maps weigh what the 3B model's do, while its weights stay small. One ``--size`` px
square image (896 px: 32 × 32 merged patches, 1,024 image tokens) and a short question.

Each side runs in a child process that prints how far its resident memory rose during the
measured call: the peak (``VmHWM``, reset just before through ``/proc/self/clear_refs``) less what
the process held when the call began (Linux only):

* ``eager``: transformers' forward with ``attn_implementation="eager"`` and
  ``output_attentions=True`` (what a script that wants every head's map runs);
* ``page``: the page's request to ``/api/attention`` computed in-process (every head a 64×64
  thumbnail with statistics, the middle head's pattern and raw scores, the image's token kinds
  and boxes), through the blockwise capture.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPE = dict(num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2, hidden_size=256,
             intermediate_size=512, max_position_embeddings=4096)
QUESTION = "What is in this picture, and where?"


def status_mib(field: str) -> float:
    """``VmRSS`` or ``VmHWM`` (the peak since the last reset) of this process, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def reset_peak() -> float:
    """Reset this process's peak resident memory to what it holds now (Linux), and return that."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_mib("VmRSS")


def child(side: str, path: str, size: int, threads: int) -> None:
    import base64
    import io

    import numpy as np
    import torch
    from PIL import Image

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
    if side == "eager":
        from attnscope.model.registry import load_model
        from transformers import AutoModelForImageTextToText

        prompt = load_model(path, device="cpu").backend.prepare(QUESTION, image)
        model = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()
        before, started = reset_peak(), time.perf_counter()
        with torch.no_grad():
            out = model(input_ids=torch.tensor([prompt.ids]), output_attentions=True, **prompt.inputs)
        tokens, kept = len(prompt.ids), sum(a.numel() * a.element_size() for a in out.attentions)
    else:
        from attnscope.app.compute.attention import attention_json
        from attnscope.app.schemas.attention import AttentionRequest
        from attnscope.app.service import build_service
        from attnscope.app.subject import subject_of
        from attnscope.model.registry import load_model

        svc = build_service(load_model(path, device="cpu"), with_heads=False)
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        focus = {"layer": 18, "head": 8, "include": ["pattern", "attn_scores_raw", "stats"]}
        body = dict(text=QUESTION, image=base64.b64encode(buf.getvalue()).decode(), include=["stats"],
                    stats_rows=False, thumbnail=64, focus=focus, encoding="b64", top_k=5)
        before, started = reset_peak(), time.perf_counter()
        req = AttentionRequest(**body)
        content, _ = attention_json(svc, req, subject_of(svc, req))
        answer = json.loads(content)
        tokens, kept = len(answer["token_ids"]), len(content)
    print(json.dumps({"side": side, "tokens": tokens, "seconds": time.perf_counter() - started,
                      "peak_growth_mib": status_mib("VmHWM") - before, "kept_mib": kept / 2**20}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=896, help="the image's side, px")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", nargs=2, metavar=("SIDE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.size, args.threads)
        return
    from tests.kit.vision import build_qwen_vl

    tokens = (args.size // 28) ** 2
    with tempfile.TemporaryDirectory() as tmp:
        path = build_qwen_vl(Path(tmp) / "qwen", min_tokens=tokens, max_tokens=tokens, **SHAPE)
        for side in ("page", "eager"):
            cmd = [sys.executable, __file__, "--child", side, str(path), "--size", str(args.size),
                   "--threads", str(args.threads)]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            what = "the answer" if side == "page" else "the attention maps"
            print(f"{side:>5}: {r['tokens']} tokens ({tokens} of them the image's), {r['seconds']:.1f} s, peak "
                  f"memory +{r['peak_growth_mib']:.0f} MiB beyond the loaded model; {what} {r['kept_mib']:.1f} MiB",
                  flush=True)


if __name__ == "__main__":
    main()
