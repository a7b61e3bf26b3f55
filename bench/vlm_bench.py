"""An image's 1,024 tokens through the page's request, against eager ``output_attentions`` and bare SDPA.

    nice -n 19 python bench/vlm_bench.py [--repeat 3] [--threads 2] [--json OUT.json]

Issue 47's first row. The model is built here (random weights, no download): LLaVA with a CLIP
tower of 448 px in 14-px patches (32 × 32 = 1,024 image tokens; one small vision layer) and a
Llama text model of a 3B model's attention shape (36 layers × 16 query heads over 2 key/value
heads, 256 wide: head size 16), so that its attention maps weigh what the 3B model's do. One
random 448 × 448 image and a short question. In one process, in rounds (each side once a round,
after one unmeasured round), the median wall time of:

* ``page``: the page's request computed as the route computes it (``attention_json``): every head
  a 64×64 thumbnail with statistics (without the unscaled softmax's, as the page's grid asks),
  the chosen head's pattern, raw scores and statistics, five predictions, b64;
* ``eager``: transformers' forward with ``attn_implementation="eager"`` and ``output_attentions=True``;
* ``sdpa``: transformers' forward with SDPA and no attentions: the fastest forward there is.

Prints page ÷ eager and page ÷ SDPA (issue 47's goals: at most 0.5 and 2).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.kit.vision import TEMPLATE, _save, _tokenizer  # noqa: E402  (the tests' own builders)

TEXT = dict(num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2, hidden_size=256,
            intermediate_size=512, max_position_embeddings=4096)
VISION = dict(model_type="clip_vision_model", hidden_size=64, intermediate_size=128, num_hidden_layers=1,
              num_attention_heads=2, image_size=448, patch_size=14)
QUESTION = "What is in this picture, and where?"


def build(out: Path) -> Path:
    """The LLaVA described above, saved with its processor like a download."""
    from transformers import AutoConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil

    out.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(["<image>"])
    image_id = tok.convert_tokens_to_ids("<image>")
    size = VISION["image_size"]
    ip = LlavaImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    LlavaProcessor(
        image_processor=ip, tokenizer=tok, patch_size=14, vision_feature_select_strategy="default",
        num_additional_image_tokens=1, image_token="<image>", chat_template=TEMPLATE.replace("{{ image }}", "<image>"),
    ).save_pretrained(out)
    cfg = AutoConfig.for_model(
        "llava", text_config=dict(model_type="llama", vocab_size=image_id + 1, **TEXT), vision_config=VISION,
        image_token_index=image_id, vision_feature_select_strategy="default", vision_feature_layer=-1,
        projector_hidden_act="gelu",
    )
    torch.manual_seed(0)
    _save(LlavaForConditionalGeneration(cfg), out, 0)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from attnscope.app.compute.attention import attention_json
    from attnscope.app.lifespan import limit_heap_retention
    from attnscope.app.schemas.attention import AttentionRequest
    from attnscope.app.service import build_service
    from attnscope.app.subject import subject_of
    from attnscope.model.registry import load_model
    from attnscope.model.vision.images import decode_image
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    limit_heap_retention()  # as the server does
    size = VISION["image_size"]
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    with tempfile.TemporaryDirectory() as tmp:
        path = build(Path(tmp) / "llava")
        lm = load_model(path, device="cpu")
        svc = build_service(lm, with_heads=False)
        prompt = lm.backend.prepare(QUESTION, decode_image(buf.getvalue(), 10**8))
        focus = {"layer": 18, "head": 8, "include": ["pattern", "attn_scores_raw", "stats"]}
        req = AttentionRequest(text=QUESTION, image=base64.b64encode(buf.getvalue()).decode(), include=["stats"],
                               stats_rows=False, stats_unscaled=False, thumbnail=64, focus=focus, encoding="b64",
                               top_k=5)
        models = {name: AutoModelForImageTextToText.from_pretrained(path, attn_implementation=name).eval()
                  for name in ("eager", "sdpa")}
        ids = torch.tensor([prompt.ids])

        def forward(name: str) -> None:
            with torch.inference_mode():
                out = models[name](input_ids=ids, output_attentions=name == "eager", **prompt.inputs)
            del out

        sides = {"page": lambda: attention_json(svc, req, subject_of(svc, req)), "eager": lambda: forward("eager"),
                 "sdpa": lambda: forward("sdpa")}
        times: dict[str, list[float]] = {name: [] for name in sides}
        for rnd in range(args.repeat + 1):
            for name, run in sides.items():
                t = time.perf_counter()
                run()
                if rnd:
                    times[name].append(time.perf_counter() - t)
    med = {name: statistics.median(v) for name, v in times.items()}
    image_tokens = int(sum(k == "image" for k in prompt.kinds))
    print(f"LLaVA, CLIP 448/14, text 36 layers × 16 heads over 2 kv heads, 256 wide; {len(prompt.ids)} tokens "
          f"({image_tokens} the image's); {args.threads} torch threads, median of {args.repeat}")
    for name, s in med.items():
        print(f"  {name:<6} {s:7.2f} s")
    print(f"  page / eager {med['page'] / med['eager']:.2f} (goal <= 0.5)   page / sdpa {med['page'] / med['sdpa']:.2f}"
          " (goal <= 2)")
    result = {"tokens": len(prompt.ids), "image_tokens": image_tokens, "seconds": med, "threads": args.threads}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
