"""An image of many tokens goes through the blockwise capture that serves long texts: a layer is
computed a block of query rows at a time (never a whole (heads, T, T) layer, let alone eager's
every layer at once), and every block's pattern is still eager attention's, image block included.
With more image tokens than Gemma 3's sliding window, a sliding layer's image block is cut by the
window on the earlier side only: an image token sees every later image token and the earlier ones
inside the window (transformers: the image block OR causal, AND the window)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from attnscope.model.capture import Capture, CapturePlan  # noqa: E402
from attnscope.model.options import AttentionOptions  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from attnscope.model.vision.images import decode_image  # noqa: E402

from tests.kit.vision import build_gemma3, image_bytes  # noqa: E402

IMAGE_TOKENS = 1024  # a 448-px SigLIP tower of 14-px patches, 32 × 32, kept unpooled
BUDGET = 1 << 20  # 1 MiB of temporaries a block: a few rows at a time at this length


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    path = build_gemma3(tmp_path_factory.mktemp("many-image-tokens") / "gemma3", image_size=448, tokens=IMAGE_TOKENS)
    return load_model(path, device="cpu")


def test_an_image_of_a_thousand_tokens_is_captured_block_by_block_and_equals_eager(gemma):
    from transformers import AutoModelForImageTextToText

    prompt = gemma.backend.prepare("What is in it?", decode_image(image_bytes(300, 200), 10**7))
    assert prompt.kinds.count("image") == IMAGE_TOKENS
    facts = gemma.facts
    plan = CapturePlan(
        layers=list(range(facts.n_layer)),
        heads=list(range(facts.n_head)),
        fields=frozenset({"pattern"}),
        stats=True,
        budget_bytes=BUDGET,
    )
    cap = Capture(plan)
    gemma.backend.hidden(prompt.ids, AttentionOptions(), cap, image=prompt)
    cap.finish()
    T = len(prompt.ids)
    assert min(cap.blocks_per_layer) > 10  # no layer was ever computed whole

    eager = AutoModelForImageTextToText.from_pretrained(gemma.path, attn_implementation="eager").eval()
    with torch.no_grad():
        out = eager(input_ids=torch.tensor([prompt.ids]), output_attentions=True, **prompt.inputs)
    image = np.array([k == "image" for k in prompt.kinds])
    n = int(image.sum())
    later = np.triu(np.ones((n, n), dtype=bool))  # an image token and every image token after it
    windows = set()
    for layer, want in zip(cap.layers, out.attentions):
        got = layer.fields["pattern"]
        assert got.shape == (facts.n_head, T, T)
        assert np.abs(got - want[0].numpy()).max() <= 1e-5
        block = layer.mask[np.ix_(image, image)]
        window = layer.window
        windows.add(window)
        inside = np.ones_like(block) if window is None else ~np.tri(n, n, -window, dtype=bool)  # j > i - window
        assert np.array_equal(block, later | inside)  # later image tokens in every block of rows, earlier by the window
        assert (got[:, image][:, :, image] * ~np.tri(n, n, 0, dtype=bool)).max() > 0  # and the weights use them
    assert windows == {None, 4}  # a full layer and a sliding one
