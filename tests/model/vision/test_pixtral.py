"""Pixtral's layout (model/vision/pixtral.py: Mistral 3, and LLaVA with a pixtral tower): the pattern over
every token equals eager ``output_attentions`` on the same ids and pixels and the mask is causal over the
image tokens; the patch grid of the image's own aspect ratio, its row breaks and each token's box worked
by hand through the resize and the patch merger; a llava model that would drop a patch is refused."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")


from tests.kit import vision  # noqa: E402
from tests.kit.vision import assert_refused, build_pixtral, load_built, traced_and_eager  # noqa: E402

BUILDERS = {"mistral3": build_pixtral, "llava": lambda out: build_pixtral(out, model_type="llava")}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return load_built(BUILDERS, tmp_path_factory.mktemp("pixtral"))


def prompt_of(lm, width=60, height=45, **kw):
    return vision.prompt_of(lm, width, height, **kw)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_pattern_equals_eager_over_every_token_and_mask_is_causal(models, name):
    lm = models[name]
    prompt = prompt_of(lm)
    trace, _, out = traced_and_eager(lm, prompt)  # every layer's pattern equals eager's
    assert len(trace) == 2
    T = len(prompt.ids)
    for t in trace:
        mask = t.mask if t.mask.dim() == 2 else t.mask[0]
        assert torch.equal(mask, torch.ones(T, T, dtype=torch.bool).tril())  # causal, image tokens included


def test_mistral3_boxes_by_hand(models):
    # 60×45 into 48 px: scaled by 1/1.25 to 48 × 36, then each side up to a multiple of 8 · 2 = 16 px: 48 × 48.
    # 3 × 3 tokens of 16 px of the resize: 16 · 60/48 = 20 wide, 16 · 45/48 = 15 high in the upload
    prompt = prompt_of(models["mistral3"])
    assert prompt.boxes == [[20 * c, 15 * r, 20 * c + 20, 15 * r + 15] for r in range(3) for c in range(3)]
    assert prompt.inputs["image_sizes"].tolist() == [[48, 48]]
    # 60×40: 48 × 32, already multiples of 16: 2 rows × 3 columns of 20 × 20
    wide = prompt_of(models["mistral3"], 60, 40)
    assert wide.boxes == [[20 * c, 20 * r, 20 * c + 20, 20 * r + 20] for r in range(2) for c in range(3)]
    # 20×10 fits: never scaled down, only stretched up to 32 × 16: 1 × 2 tokens of 10 × 10
    assert prompt_of(models["mistral3"], 20, 10).boxes == [[0, 0, 10, 10], [10, 0, 20, 10]]


def test_llava_pixtral_boxes_by_hand(models):
    # no patch merger: 8-px tokens; 60×45 -> 48 × 36 -> 48 × 40 (36 up to a multiple of 8): 5 rows × 6 columns,
    # each 8 · 60/48 = 10 wide and 8 · 45/40 = 9 high
    prompt = prompt_of(models["llava"])
    assert prompt.boxes == [[10 * c, 9 * r, 10 * c + 10, 9 * r + 9] for r in range(5) for c in range(6)]


@pytest.mark.parametrize("name,rows,cols", [("mistral3", 3, 3), ("llava", 5, 6)])
def test_rows_end_in_breaks_and_the_image_in_its_end(models, name, rows, cols):
    lm = models[name]
    prompt = prompt_of(lm)
    tokens = lm.backend.processor.tokenizer.convert_ids_to_tokens(prompt.ids)
    first = tokens.index("[IMG]")
    run = tokens[first : first + rows * (cols + 1)]
    want = [*(["[IMG]"] * cols + ["[IMG_BREAK]"]) * (rows - 1), *["[IMG]"] * cols, "[IMG_END]"]
    assert run == want
    assert prompt.kinds[first : first + len(run)] == ["image" if t == "[IMG]" else "marker" for t in run]
    assert prompt.kinds.count("marker") == rows and prompt.kinds.count("image") == rows * cols


def test_each_token_carries_the_patches_the_merger_folds_into_it(models):
    # the model's own patch merger on patch indices, its linear layer set to pass the first channel's block through
    lm = models["mistral3"]
    merger = copy.deepcopy(lm.backend.model.model.multi_modal_projector.patch_merger)
    hidden, m = merger.merging_layer.in_features // 4, 2
    with torch.no_grad():
        merger.merging_layer.weight.zero_()
        merger.merging_layer.weight[: m * m, : m * m] = torch.eye(m * m)
    rows, cols = 6, 6  # a 48 × 48 resize of 8-px patches
    patches = torch.arange(rows * cols, dtype=torch.float32)[:, None].expand(-1, hidden)
    folded = merger(patches, torch.tensor([[48, 48]]))[:, : m * m].long().tolist()
    boxes = lm.backend.layout.lay_out([lm.backend.layout.image_token_id] * 9, 48, 48).boxes  # one upload px per px
    for box, block in zip(boxes, folded, strict=True):
        r, c = [p // cols for p in block], [p % cols for p in block]
        assert box == [8 * min(c), 8 * min(r), 8 * (max(c) + 1), 8 * (max(r) + 1)]


def test_llava_pixtral_dropping_a_patch_is_refused(tmp_path):
    d = build_pixtral(tmp_path / "m", model_type="llava")
    assert_refused(d, "strategy is full", vision_feature_select_strategy="default")
