"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL, dense and MoE (model/vision/qwen.py): every language-model layer's pattern over
every token equals eager ``output_attentions`` on the same ids, pixels and multimodal RoPE positions;
the mask is causal over image tokens too; each image token's box is the block of the smart-resized image
its 2 × 2 merged patches came from, worked by hand and read back from the pixels the model receives;
the processor's image path without torchvision equals transformers' own processor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from attnscope.model.options import AttentionOptions  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from attnscope.model.vision.images import decode_image  # noqa: E402
from attnscope.model.vision.llava import LayoutError  # noqa: E402
from attnscope.model.vision.qwen import QwenProcessor  # noqa: E402

from tests.kit.vision import build_qwen_vl, image_bytes  # noqa: E402

TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
PROCESSORS = dict(zip(TYPES, ("Qwen2VLProcessor", "Qwen2_5_VLProcessor", "Qwen3VLProcessor", "Qwen3VLProcessor")))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen")
    return {t: load_model(build_qwen_vl(root / t, t), device="cpu") for t in TYPES}


def prompt_of(lm, width=100, height=45, text="The cat sat on the mat."):
    return lm.backend.prepare(text, decode_image(image_bytes(width, height), 10**7))


@pytest.mark.parametrize("name", TYPES)
def test_pattern_equals_eager_over_every_token(models, name):
    from transformers import AutoModelForImageTextToText

    lm = models[name]
    prompt = prompt_of(lm)
    trace: list = []
    lm.backend.hidden(prompt.ids, AttentionOptions(), trace, image=prompt)
    eager = AutoModelForImageTextToText.from_pretrained(lm.path, attn_implementation="eager").eval()
    ids = torch.tensor([prompt.ids])
    as_text = {**prompt.inputs, "mm_token_type_ids": torch.zeros_like(prompt.inputs["mm_token_type_ids"])}
    with torch.no_grad():
        out = eager(input_ids=ids, output_attentions=True, **prompt.inputs)
        flat = eager(input_ids=ids, output_attentions=True, **as_text)  # every token at a text position
    assert "image" in prompt.kinds and len(trace) == len(out.attentions)
    image = torch.tensor([k == "image" for k in prompt.kinds])
    for t, want, text_rope in zip(trace, out.attentions, flat.attentions):
        assert t.pattern.shape == want.shape
        torch.testing.assert_close(t.pattern, want, atol=1e-5, rtol=0)
        assert not torch.allclose(want, text_rope, atol=1e-3)  # the image's RoPE positions are not the text's
        mask = t.mask if t.mask.dim() == 2 else t.mask[0]
        assert torch.equal(mask, torch.ones_like(mask).tril())  # causal, the image tokens too
        assert not t.pattern[0][:, image][:, :, image].triu(1).any()


def test_markers_around_the_image_run(models):
    prompt = prompt_of(models["qwen2_5_vl"])
    image = [i for i, k in enumerate(prompt.kinds) if k == "image"]
    markers = [i for i, k in enumerate(prompt.kinds) if k == "marker"]
    assert image == list(range(image[0], image[-1] + 1)) and markers == [image[0] - 1, image[-1] + 1]
    assert prompt.inputs["mm_token_type_ids"][0].tolist() == [int(k == "image") for k in prompt.kinds]


def test_boxes_through_the_smart_resize_by_hand(models):
    lm = models["qwen2_5_vl"]  # 14-px patches merged 2 × 2: 28-px tokens, 4 .. 9 of them (3136 .. 7056 pixels)
    # 100×45: each side rounded to a multiple of 28, 112×56 = 6272 pixels, within the limits: 4 × 2 tokens;
    # 28 resized px are 28 · 100/112 = 25 wide and 28 · 45/56 = 22.5 high
    wide = prompt_of(lm, 100, 45)
    assert wide.boxes == [[25 * c, 22.5 * r, 25 * (c + 1), 22.5 * (r + 1)] for r in range(2) for c in range(4)]
    assert wide.inputs["image_grid_thw"].tolist() == [[1, 4, 8]]  # the processor's own grid: 2·2 by 2·4 patches
    # 200×90 rounds to 196×84 = 16464 > 7056: scaled by √(18000 / 7056), floored to 56 high, 112 wide
    big = prompt_of(lm, 200, 90)
    assert big.boxes[0] == pytest.approx([0, 0, 50, 45]) and big.boxes[-1] == pytest.approx([150, 45, 200, 90])
    # 30×20 rounds to 28×28 = 784 < 3136: scaled by √(3136 / 600), ceiled to 56 high, 84 wide: 10 × 10 px tokens
    small = prompt_of(lm, 30, 20)
    assert small.boxes == [[10 * c, 10 * r, 10 * (c + 1), 10 * (r + 1)] for r in range(2) for c in range(3)]
    # Qwen3-VL: 16-px patches, 32-px tokens; 100×45 rounds to 96×32, under 4096 pixels: ceiled to 96×64
    third = prompt_of(models["qwen3_vl"], 100, 45)
    assert third.boxes[1] == pytest.approx([100 / 3, 0, 200 / 3, 22.5], abs=1e-4) and len(third.boxes) == 6


@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])
def test_each_image_token_carries_its_box_of_the_resized_image(models, name):
    from PIL import Image

    lm = models[name]
    ip = lm.backend.processor.image_processor
    p, t = ip.patch_size, ip.temporal_patch_size
    width, height = 100, 45
    prompt = prompt_of(lm, width, height)
    _, gh, gw = prompt.inputs["image_grid_thw"][0].tolist()
    W, H = gw * p, gh * p
    im = decode_image(image_bytes(width, height), 10**7).resize((W, H), Image.BICUBIC)
    resized = (np.asarray(im, np.float32) / 255 - ip.image_mean) / ip.image_std  # (H, W, 3)
    # the model's pixel_values: per token its 2 × 2 patches, each 3 channels × t frames × p × p
    tokens = prompt.inputs["pixel_values"].numpy().reshape(-1, 2, 2, 3, t, p, p)[:, :, :, :, 0]
    assert len(tokens) == len(prompt.boxes)
    for block, (x0, y0, x1, y1) in zip(tokens, prompt.boxes):
        u0, v0 = round(x0 * W / width), round(y0 * H / height)  # the box back in the resized image
        assert (round(x1 * W / width) - u0, round(y1 * H / height) - v0) == (2 * p, 2 * p)
        pixels = block.transpose(0, 3, 1, 4, 2).reshape(2 * p, 2 * p, 3)  # (mh, y, mw, x, c) -> rows, columns
        np.testing.assert_allclose(pixels, resized[v0 : v0 + 2 * p, u0 : u0 + 2 * p], atol=1e-5)


@pytest.mark.parametrize("name", TYPES)
def test_processor_without_torchvision_equals_transformers_processor(models, name, monkeypatch):
    import transformers
    from transformers.processing_utils import ProcessorMixin

    ours = models[name].backend.processor
    assert isinstance(ours, QwenProcessor)  # torchvision is missing here: the processor does not load
    check = ProcessorMixin.check_argument_for_proper_class  # it refuses video_processor=None without torchvision
    monkeypatch.setattr(ProcessorMixin, "check_argument_for_proper_class", lambda s, n, a: a is None or check(s, n, a))
    real = getattr(transformers, PROCESSORS[name])(ours.image_processor, ours.tokenizer, None, ours.chat_template)
    turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}]
    text = real.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
    assert ours.apply_chat_template(turn, add_generation_prompt=True) == text
    image = decode_image(image_bytes(100, 45), 10**7)
    want, got = real(text=text, images=[image], return_tensors="pt"), ours(text=text, images=[image])
    assert sorted(want.keys()) == sorted(got.keys())
    for key in want:
        assert torch.equal(want[key], got[key]), key


def test_aspect_ratio_over_200_refused(models):
    with pytest.raises(LayoutError, match="aspect ratio"):
        prompt_of(models["qwen2_5_vl"], 402, 2)


def test_text_only_after_an_image_is_plain_text(models):
    from transformers import AutoModelForImageTextToText

    lm = models["qwen2_5_vl"]  # the model keeps the image's rope_deltas between calls: a text pass must not read them
    image_prompt = prompt_of(lm)
    lm.backend.hidden(image_prompt.ids, AttentionOptions(), [], image=image_prompt)
    ids = lm.backend.tokenizer.encode("The cat sat on the mat.").ids
    trace: list = []
    lm.backend.hidden(ids, AttentionOptions(), trace)
    eager = AutoModelForImageTextToText.from_pretrained(lm.path, attn_implementation="eager").eval()
    with torch.no_grad():
        out = eager(input_ids=torch.tensor([ids]), output_attentions=True)
    for t, want in zip(trace, out.attentions, strict=True):
        torch.testing.assert_close(t.pattern, want, atol=1e-5, rtol=0)


def test_legacy_chat_template_json_is_the_processors(tmp_path):
    import json

    d = build_qwen_vl(tmp_path / "m")
    template = (d / "chat_template.jinja").read_text()
    (d / "chat_template.jinja").unlink()  # as older Qwen2.5-VL folders ship it: chat_template.json only
    (d / "chat_template.json").write_text(json.dumps({"chat_template": template}))
    processor = QwenProcessor.from_pretrained(d)
    assert processor.tokenizer.chat_template is None and processor.chat_template == template


def test_patches_the_tower_does_not_use_refused_in_one_line(tmp_path):
    import json

    from attnscope.model.ours.checkpoint import CheckpointError

    d = build_qwen_vl(tmp_path / "m")
    cfg = json.loads((d / "preprocessor_config.json").read_text())
    (d / "preprocessor_config.json").write_text(json.dumps({**cfg, "patch_size": 16}))  # the tower's are 14 px
    with pytest.raises(CheckpointError, match="patches 16 px merged 2×2 for a tower of 14 px") as e:
        load_model(d, device="cpu")
    assert "\n" not in str(e.value)


def test_without_a_chat_template_the_image_comes_first_between_markers(tmp_path):
    d = build_qwen_vl(tmp_path / "m")
    (d / "chat_template.jinja").unlink()
    lm = load_model(d, device="cpu")
    assert lm.backend.processor.chat_template is None
    prompt = prompt_of(lm, text="The cat")
    text = lm.backend.tokenizer.encode("The cat").ids
    assert prompt.kinds == ["marker"] + ["image"] * 8 + ["marker"] + ["text"] * len(text)
    assert prompt.ids[10:] == text
