"""Image-text models (model/vision): every language-model layer's pattern over every token, image
tokens included, equals eager ``output_attentions`` on the same ids and pixels; each image token's
box is the region its features came from, worked by hand per layout; Gemma 3's image block."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from attnscope.model.options import AttentionOptions  # noqa: E402

from tests.kit.vision import (  # noqa: E402
    assert_refused,
    build_gemma3,
    build_llava,
    load_built,
    prompt_of,
    traced_and_eager,
)

BUILDERS = {"llava": build_llava, "llava_full": lambda out: build_llava(out, strategy="full"), "gemma3": build_gemma3}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return load_built(BUILDERS, tmp_path_factory.mktemp("vision"))


@pytest.mark.parametrize("name", list(BUILDERS))
def test_pattern_equals_eager_over_every_token(models, name):
    traced_and_eager(models[name], prompt_of(models[name]))  # every layer's pattern equals eager's, within 1e-5


def test_llava_boxes_crop_and_scale_by_hand(models):
    # 60×40: the shortest side 40 -> 28, so the long side int(28 · 60 / 40) = 42 and 60/42 original px per
    # resized px (40/28 down); the 28-px centre crop starts at (42 − 28) // 2 = 7: patch columns 7..21 and
    # 21..35 of the resized image are x 10..30 and 30..50 of the original, rows 0..14, 14..28 are y 0..20, 20..40
    prompt = prompt_of(models["llava"])
    assert prompt.boxes == [[10, 0, 30, 20], [30, 0, 50, 20], [10, 20, 30, 40], [30, 20, 50, 40]]
    # tall 30×45: width 30 -> 28, height int(28 · 45 / 30) = 42, crop top 7: y (7 + 14r) · 45/42, x 14c · 30/28
    tall = prompt_of(models["llava"], 30, 45)
    assert tall.boxes[0] == pytest.approx([0, 7.5, 15, 22.5]) and tall.boxes[3] == pytest.approx([15, 22.5, 30, 37.5])


def test_llava_cls_token_carries_the_whole_crop(models):
    prompt = prompt_of(models["llava_full"])  # vision_feature_select_strategy full: CLS first, then the 2×2 patches
    assert prompt.kinds.count("image") == 5
    assert prompt.boxes[0] == [10, 0, 50, 40] and prompt.boxes[1:] == prompt_of(models["llava"]).boxes


def test_gemma3_boxes_pooled_cells_by_hand(models):
    # a 56-px tower of 14-px patches (4×4) pooled to 2×2 tokens: each token 2×2 patches = 28 px of the 56×56
    # resize; 60×40 resized without a crop: x · 60/56, y · 40/56, so 28 px is 30 wide and 20 high
    prompt = prompt_of(models["gemma3"])
    assert prompt.boxes == [[0, 0, 30, 20], [30, 0, 60, 20], [0, 20, 30, 40], [30, 20, 60, 40]]
    image = [i for i, k in enumerate(prompt.kinds) if k == "image"]
    markers = [i for i, k in enumerate(prompt.kinds) if k == "marker"]
    assert markers == [image[0] - 1, image[-1] + 1]  # begin and end of image around the run


def test_gemma3_image_tokens_see_each_other_both_ways(models):
    lm = models["gemma3"]
    prompt = prompt_of(lm)
    trace: list = []
    lm.backend.hidden(prompt.ids, AttentionOptions(), trace, image=prompt)
    image = torch.tensor([k == "image" for k in prompt.kinds])
    for t in trace:
        mask = t.mask if t.mask.dim() == 2 else t.mask[0]
        block = mask[image][:, image]
        assert block.all()  # the first image token sees the last one, ahead of it
        causal = torch.ones_like(mask).tril()
        outside = ~(image[:, None] & image[None, :])
        assert torch.equal(mask[outside], (mask & causal)[outside])  # causal everywhere else
        assert (t.pattern[0][:, image][:, :, image].triu(1) > 0).any()  # and the pattern uses it


def test_other_image_text_model_refused_in_one_line(tmp_path):
    assert_refused(build_llava(tmp_path / "m"), "exactly only for llava, gemma3", model_type="llava_next")
