"""POST /api/attention with an image on Idefics3 / SmolVLM (tiles plus a global view) and on Pixtral's layout
(Mistral 3, LLaVA with a pixtral tower): the served pattern over every token equals eager's on the same ids
and pixels, the mask is causal over the image tokens, and token_kinds and boxes are the layout's."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from tests.kit.app import attention  # noqa: E402
from tests.kit.vision import b64, build_idefics3, build_pixtral, image_bytes  # noqa: E402

TEXT = "The cat sat on the mat."


BUILDERS = {  # and the image tokens of a 60×40 upload
    "idefics3": (build_idefics3, 28),  # 2 × 3 tiles and the global view, 4 tokens each
    "smolvlm": (build_idefics3, 28),
    "mistral3": (build_pixtral, 6),  # 2 × 3 merged patches
    "llava": (build_pixtral, 24),  # 4 × 6 patches
}


@pytest.mark.parametrize("model_type", list(BUILDERS))
def test_served_pattern_equals_eager(tmp_path, model_type):
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from attnscope.model.registry import load_model
    from attnscope.model.vision.images import decode_image
    from attnscope.model.vision.layout import seen_region
    from fastapi.testclient import TestClient
    from transformers import AutoModelForImageTextToText

    build, n_image = BUILDERS[model_type]
    path = build(tmp_path / model_type, model_type=model_type)
    png = image_bytes(60, 40)
    with TestClient(create_app(Settings(checkpoint=path, device="cpu", torch_threads=1))) as client:
        got = attention(client, text=TEXT, image="data:image/png;base64," + b64(png), include=["pattern"], top_k=0)
    prompt = load_model(path, device="cpu").backend.prepare(TEXT, decode_image(png, 10**7))
    assert got["token_ids"] == prompt.ids and got["token_kinds"] == prompt.kinds
    assert got["image"] == {"width": 60, "height": 40, "boxes": prompt.boxes, "seen": seen_region(prompt.boxes)}
    assert len(prompt.boxes) == got["token_kinds"].count("image") == n_image
    T = len(prompt.ids)
    assert torch.equal(torch.tensor(got["mask"], dtype=torch.bool), torch.ones(T, T, dtype=torch.bool).tril())
    eager = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()
    with torch.no_grad():
        out = eager(input_ids=torch.tensor([prompt.ids]), output_attentions=True, **prompt.inputs)
    assert len(got["layers"]) == len(out.attentions) == 2
    for layer, want in zip(got["layers"], out.attentions):
        for head in layer["heads"]:
            served = torch.tensor(head["pattern"], dtype=torch.float64)
            torch.testing.assert_close(served, want[0, head["head"]].double(), atol=1e-5, rtol=0)
