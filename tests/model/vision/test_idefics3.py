"""Idefics3 and SmolVLM (model/vision/idefics3.py): the pattern over every token equals eager
``output_attentions`` on the same ids and pixels; the tiles, the global view and each token's box
worked by hand for an image that needs the resize and splits into 2 × 3 tiles; every token of the
image's expansion but the image tokens is a marker; the language model's mask is causal over them."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")


from tests.kit.vision import build_idefics3, load_built, prompt_of, traced_and_eager  # noqa: E402

BUILDERS = {
    "idefics3": build_idefics3,
    "smolvlm": lambda out: build_idefics3(out, model_type="smolvlm"),
    "one_tile": lambda out: build_idefics3(out, longest=28),  # the image fits one tile: the global view only
    "no_split": lambda out: build_idefics3(out, splitting=False),  # do_image_splitting off: resized to one tile
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return load_built(BUILDERS, tmp_path_factory.mktemp("idefics3"))


@pytest.mark.parametrize("name", list(BUILDERS))
def test_pattern_equals_eager_over_every_token_and_mask_is_causal(models, name):
    lm = models[name]
    prompt = prompt_of(lm)
    trace, _, out = traced_and_eager(lm, prompt)  # every layer's pattern equals eager's
    T = len(prompt.ids)
    for t in trace:
        mask = t.mask if t.mask.dim() == 2 else t.mask[0]
        assert torch.equal(mask, torch.ones(T, T, dtype=torch.bool).tril())  # causal, image tokens included


def test_tiles_then_global_view_boxes_by_hand(models):
    # 60×40: the longest side to 84 -> 84 × int(84 / 1.5) = 84 × 56, already multiples of the 28-px tile:
    # 2 rows × 3 columns of tiles, each 28 · 60/84 = 20 wide and 28 · 40/56 = 20 high in the upload; a tile's
    # 4 × 4 patches of 7 px shuffled 2 × 2 -> 4 tokens of 10 × 10 px, row by row. Then the global view: the
    # whole 60×40 squeezed to 28 × 28, its 4 tokens 30 × 20 each.
    lm = models["idefics3"]
    prompt = prompt_of(lm)
    assert len(prompt.boxes) == (2 * 3 + 1) * 4 == prompt.kinds.count("image")
    tiles = [prompt.boxes[4 * i : 4 * i + 4] for i in range(7)]
    for i, tile in enumerate(tiles[:6]):
        x, y = 20 * (i % 3), 20 * (i // 3)
        assert tile == [
            [x, y, x + 10, y + 10],
            [x + 10, y, x + 20, y + 10],
            [x, y + 10, x + 10, y + 20],
            [x + 10, y + 10, x + 20, y + 20],
        ]
    assert tiles[6] == [[0, 0, 30, 20], [30, 0, 60, 20], [0, 20, 30, 40], [30, 20, 60, 40]]
    assert prompt.inputs["pixel_values"].shape[:2] == (1, 7)  # six tiles and the global view, as the model reads them


def test_tall_image_rounds_up_to_whole_tiles(models):
    # 30×50: height to 84, width int(84 · 0.6) = 50 (even); up to multiples of 28: 84 high, width
    # ceil(int(84 · 0.6) / 28) · 28 = 56: 3 rows × 2 columns, each tile 28 · 30/56 = 15 wide, 28 · 50/84 = 50/3 high
    prompt = prompt_of(models["idefics3"], 30, 50)
    assert len(prompt.boxes) == (3 * 2 + 1) * 4
    last_tile = prompt.boxes[5 * 4 : 6 * 4]  # row 3, column 2
    assert last_tile[0] == pytest.approx([15, 100 / 3, 22.5, 100 / 3 + 25 / 3], abs=1e-4)
    assert last_tile[3] == pytest.approx([22.5, 125 / 3, 30, 50], abs=1e-4)
    assert prompt.boxes[-4:] == [[0, 0, 15, 25], [15, 0, 30, 25], [0, 25, 15, 50], [15, 25, 30, 50]]


@pytest.mark.parametrize("name", ["one_tile", "no_split"])
def test_one_view_is_the_whole_image(models, name):
    prompt = prompt_of(models[name])
    assert prompt.boxes == [[0, 0, 30, 20], [30, 0, 60, 20], [0, 20, 30, 40], [30, 20, 60, 40]]
    assert prompt.inputs["pixel_values"].shape[:2] == (1, 1) and prompt.kinds.count("marker") == 3


def test_each_token_carries_the_patches_the_pixel_shuffle_folds_into_it(models):
    # the connector's own pixel shuffle on patch indices: which 7-px patches of a view each token holds
    lm = models["idefics3"]
    connector = lm.backend.model.model.connector
    side = 28 // 7
    folded = connector.pixel_shuffle(torch.arange(side * side, dtype=torch.float32).view(1, -1, 1), 2)[0]
    layout = lm.backend.layout
    view = layout.boxes(28, 28)[-4:]  # the global view of a 28×28 upload: one uploaded pixel per view pixel
    for box, patches in zip(view, folded.long().tolist()):
        rows, cols = [p // side for p in patches], [p % side for p in patches]
        assert box == [7 * min(cols), 7 * min(rows), 7 * (max(cols) + 1), 7 * (max(rows) + 1)]


def test_image_expansion_kinds(models):
    lm = models["idefics3"]
    prompt = prompt_of(lm)
    tokens = lm.backend.processor.tokenizer.convert_ids_to_tokens(prompt.ids)
    first, last = prompt.kinds.index("marker"), len(prompt.kinds) - prompt.kinds[::-1].index("marker") - 1
    assert tokens[first] == tokens[last] == "<fake_token_around_image>"
    inside = list(zip(tokens[first : last + 1], prompt.kinds[first : last + 1]))
    assert all((k == "image") == (t == "<image>") for t, k in inside)
    assert [t for t, k in inside if t.startswith("<row_")] == [f"<row_{r}_col_{c}>" for r in (1, 2) for c in (1, 2, 3)]
    assert tokens.count("<global-img>") == 1 and tokens.index("<global-img>") == first + len(inside) - 6
    assert set(prompt.kinds[:first] + prompt.kinds[last + 1 :]) == {"text"}
