"""The prompt's length against the model's context: with an image only the text's own tokens can be
cut, so the refusal says how much of the text fits beside the image, or names the image when it
does not fit at all."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from attnscope.app.compute.checks import check_token_count
from attnscope.app.errors import ApiError

pytest.importorskip("transformers")

from tests.kit.vision import b64, build_gemma3, image_bytes  # noqa: E402


def facts(block_size: int) -> SimpleNamespace:
    return SimpleNamespace(block_size=block_size)  # all of the model the check reads


def image_prompt(n_image: int, words: int) -> tuple[list[str], list[list[int]]]:
    """A template token, a marker, ``n_image`` image tokens, a marker, then ``words`` text tokens of
    4 characters each and one template token after them, as a processor lays them out."""
    kinds = ["text", "marker", *["image"] * n_image, "marker", *["text"] * words, "text"]
    offsets = [[0, 0]] * (n_image + 3) + [[4 * i, 4 * i + 4] for i in range(words)] + [[4 * words, 4 * words]]
    return kinds, offsets


def refusal(n: int, limit: int, offsets, kinds) -> dict:
    with pytest.raises(ApiError) as e:
        check_token_count(n, facts(limit), offsets, kinds)
    return e.value.detail[0]


def test_the_text_that_fits_beside_the_image():
    kinds, offsets = image_prompt(10, 20)  # 34 tokens: 14 that stay, 20 of text
    check_token_count(len(kinds), facts(34), offsets, kinds)
    detail = refusal(len(kinds), 30, offsets, kinds)  # 16 of the text's tokens fit
    assert detail["loc"] == ["body", "text"] and detail["ctx"]["fits_chars"] == 16 * 4
    assert detail["ctx"]["limit"] == 30 and detail["ctx"]["count"] == 34


@pytest.mark.parametrize("limit", [5, 14])
def test_an_image_over_the_context_is_named(limit):
    kinds, offsets = image_prompt(10, 20)
    detail = refusal(len(kinds), limit, offsets, kinds)
    assert detail["loc"] == ["body", "image"] and "14 tokens" in detail["msg"] and str(limit) in detail["msg"]


def test_a_served_image_over_the_context_is_a_422_naming_image(tmp_path):
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    path = build_gemma3(tmp_path / "g", image_size=448, tokens=1024)  # 1,024 image tokens; a 512-token context
    with TestClient(create_app(Settings(checkpoint=path, device="cpu", torch_threads=1))) as c:
        image = "data:image/png;base64," + b64(image_bytes(60, 40))
        r = c.post("/api/attention", json={"text": "What is it?", "image": image})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "image"]
        r = c.post("/api/rollout", json={"text": "What is it?", "image": image})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "image"]
        assert c.post("/api/attention", json={"text": "What is it?", "top_k": 0}).status_code == 200
