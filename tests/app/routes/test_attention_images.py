"""POST /api/attention with an image: the served pattern over every token equals eager's on the
same ids and pixels, token_kinds and boxes come back, /api/model says vision; every bad image is a
422 naming `image` (413 over the byte limit) and the server keeps serving."""

from __future__ import annotations

import io

import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from tests.kit.app import attention, build_checkpoint  # noqa: E402
from tests.kit.vision import b64, build_each, image_bytes  # noqa: E402

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    root = tmp_path_factory.mktemp("vision_app")
    dirs = {**build_each(["llava", "gemma3", "qwen2_5_vl"], root), "text": build_checkpoint(root / "t")}
    limits = dict(max_image_pixels=5000, max_image_bytes=20000)
    with TestClient(create_app(Settings(checkpoint=dirs["llava"], device="cpu", torch_threads=1, **limits))) as a, \
            TestClient(create_app(Settings(checkpoint=dirs["gemma3"], device="cpu", torch_threads=1))) as b, \
            TestClient(create_app(Settings(checkpoint=dirs["text"], device="cpu", torch_threads=1))) as c, \
            TestClient(create_app(Settings(checkpoint=dirs["qwen2_5_vl"], device="cpu", torch_threads=1))) as d:
        yield {"llava": a, "gemma3": b, "text": c, "qwen2_5_vl": d, "dirs": dirs}


@pytest.mark.parametrize("name", ["llava", "gemma3", "qwen2_5_vl"])
def test_served_pattern_equals_eager(clients, name):
    from attnscope.model.registry import load_model
    from attnscope.model.vision.images import decode_image
    from attnscope.model.vision.layout import seen_region
    from transformers import AutoModelForImageTextToText

    png = image_bytes(60, 40)
    url = "data:image/png;base64," + b64(png)
    got = attention(clients[name], text=TEXT, image=url, include=["pattern"], top_k=0)
    lm = load_model(clients["dirs"][name], device="cpu")
    prompt = lm.backend.prepare(TEXT, decode_image(png, 10**7))
    assert got["token_ids"] == prompt.ids and got["token_kinds"] == prompt.kinds
    assert got["image"] == {"width": 60, "height": 40, "boxes": prompt.boxes, "seen": seen_region(prompt.boxes)}
    assert len(got["image"]["boxes"]) == got["token_kinds"].count("image")
    eager = AutoModelForImageTextToText.from_pretrained(clients["dirs"][name], attn_implementation="eager").eval()
    with torch.no_grad():
        out = eager(input_ids=torch.tensor([prompt.ids]), output_attentions=True, **prompt.inputs)
    for layer, want in zip(got["layers"], out.attentions):
        for head in layer["heads"]:
            served = torch.tensor(head["pattern"], dtype=torch.float64)
            torch.testing.assert_close(served, want[0, head["head"]].double(), atol=1e-5, rtol=0)
    if name == "gemma3":  # the served mask is the model's: the image block both ways
        mask = torch.tensor(got["mask"], dtype=torch.bool)
        image = torch.tensor([k == "image" for k in got["token_kinds"]])
        assert mask[image][:, image].all() and not mask.triu(1)[~image].any()
    if name == "qwen2_5_vl":  # causal over the image too; its tokens between vision start and end markers
        mask = torch.tensor(got["mask"], dtype=torch.bool)
        assert torch.equal(mask, torch.ones_like(mask).tril()) and got["token_kinds"].count("marker") == 2
    text = [i for i, k in enumerate(got["token_kinds"]) if k == "text" and got["offsets"][i][1] > got["offsets"][i][0]]
    assert "".join(TEXT[a:b] for a, b in (got["offsets"][i] for i in text)) == TEXT  # the text's own tokens


def test_qwen_aspect_ratio_over_200_is_422_naming_image(clients):
    r = clients["qwen2_5_vl"].post("/api/attention", json={"text": TEXT, "image": b64(image_bytes(402, 2))})
    assert r.status_code == 422, r.text
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "image"] and item["type"] == "image_layout" and "aspect ratio" in item["msg"]
    assert attention(clients["qwen2_5_vl"], text=TEXT, image=b64(image_bytes(30, 20)), top_k=0)["image"]["width"] == 30


def test_model_says_vision(clients):
    info = clients["llava"].get("/api/model").json()
    assert info["vision"] is True and info["image_limits"] == {"max_bytes": 20000, "max_pixels": 5000}
    text = clients["text"].get("/api/model").json()
    assert text["vision"] is False and text["image_limits"] is None


def _gif_or(fmt: str) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (20, 20), (200, 10, 10)).save(buf, format=fmt)
    return buf.getvalue()


BAD = {
    "not an image": (b"hello, this is text", "image_not_image"),
    "truncated": (image_bytes(60, 40, "PNG")[:300], "image_truncated"),
    "unsupported format": (_gif_or("BMP"), "image_format"),
    "over the pixel limit": (image_bytes(100, 60, "PNG"), "image_too_many_pixels"),
    "not base64": (None, "image_encoding"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_image_is_422_naming_image(clients, case):
    data, type_ = BAD[case]
    value = "@@not base64@@" if data is None else b64(data)
    r = clients["llava"].post("/api/attention", json={"text": TEXT, "image": value})
    assert r.status_code == 422, r.text
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "image"] and item["type"] == type_
    assert attention(clients["llava"], text=TEXT, image=b64(_gif_or("GIF")), top_k=0)["image"]["width"] == 20


def test_image_over_byte_limit_is_413(clients):
    big = image_bytes(50, 50, "PNG")  # random noise: about 7.5 KB over 2500 pixels, so make it larger
    big = big + b"\0" * (25000 - len(big))
    r = clients["llava"].post("/api/attention", json={"text": TEXT, "image": b64(big)})
    assert r.status_code == 413 and r.json()["detail"][0]["loc"] == ["body", "image"]


def test_image_to_text_model_is_422(clients):
    r = clients["text"].post("/api/attention", json={"text": TEXT, "image": b64(_gif_or("PNG"))})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "image"]
    assert "reads text only" in r.json()["detail"][0]["msg"]


def test_body_limit_grows_for_image_routes_on_vision_models_only(clients):
    from attnscope.app.settings import Settings

    dirs = clients["dirs"]
    vision = Settings(checkpoint=dirs["llava"], max_image_bytes=20000)
    assert vision.image_body_limit() >= vision.body_limit() + 4 * 20000 // 3
    assert Settings(checkpoint=dirs["text"]).image_body_limit() is None
