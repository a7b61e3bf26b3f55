"""An image's base64 as people send it, and an image over the limit by a little or by a lot.

Base64 wrapped in lines (``base64.encodebytes``, GNU ``base64``: 76 columns) is the same image as
unwrapped; any other character outside the alphabet is still a 422. Over ``max_bytes`` the 413
names ``image`` and its ``max_bytes`` (GET /api/model ``image_limits``), whether the image is a
little over (found by the route) or so far over that the body is (found before the route reads it).
"""

from __future__ import annotations

import base64

import pytest

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from tests.kit.vision import b64, build_llava, image_bytes  # noqa: E402

TEXT = "The cat sat on the mat."
MAX_BYTES = 20000


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    path = build_llava(tmp_path_factory.mktemp("sizes") / "llava")
    limits = dict(max_image_pixels=5000, max_image_bytes=MAX_BYTES)
    settings = Settings(checkpoint=path, device="cpu", torch_threads=1, **limits)
    with TestClient(create_app(settings)) as c:
        yield c


def padded_png(size: int) -> bytes:
    """A PNG that Pillow reads, followed by zeros up to ``size`` bytes."""
    png = image_bytes(30, 20, "PNG")
    return png + b"\0" * (size - len(png))


def wrapped(data: bytes) -> str:
    return base64.encodebytes(data).decode()  # lines of 76 characters, each ending in a newline


def test_wrapped_base64_is_the_same_bytes():
    from attnscope.app.images import upload_bytes as decode

    png = image_bytes(30, 20, "PNG")
    text = wrapped(png)
    assert "\n" in text.rstrip("\n")  # more than one line
    for value in (text, text.replace("\n", "\r\n"), " ".join(b64(png)), "data:image/png;base64,\n" + text):
        assert decode(value, MAX_BYTES) == png


@pytest.mark.parametrize("bad", ["*", "-", "é", "\0"])
def test_other_characters_are_still_not_base64(bad):
    from attnscope.app.errors import ApiError
    from attnscope.app.images import upload_bytes as decode

    text = wrapped(image_bytes(30, 20, "PNG"))
    value = text[:80] + bad + text[80:]
    with pytest.raises(ApiError) as e:
        decode(value, MAX_BYTES)
    assert e.value.status_code == 422 and e.value.detail[0]["type"] == "image_encoding"


def test_a_served_wrapped_image_answers_as_unwrapped(llava):
    png = image_bytes(30, 20, "PNG")
    answers = []
    for image in (b64(png), wrapped(png), "data:image/png;base64," + wrapped(png)):
        r = llava.post("/api/attention", json={"text": TEXT, "image": image, "top_k": 0})
        assert r.status_code == 200, r.text
        answers.append(r.json())
    for got in answers[1:]:
        assert got["token_ids"] == answers[0]["token_ids"] and got["image"] == answers[0]["image"]


def test_an_image_of_max_bytes_fits_wrapped_in_crlf_lines(llava):
    """The body limit leaves room for the line breaks of an image of ``max_bytes``."""
    image = wrapped(padded_png(MAX_BYTES)).replace("\n", "\r\n")
    r = llava.post("/api/attention", json={"text": TEXT * 50, "image": image, "top_k": 0})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("size", [MAX_BYTES + 100, 2 * MAX_BYTES, 20 * MAX_BYTES])
@pytest.mark.parametrize("chunked", [False, True])
def test_an_image_over_max_bytes_is_a_413_naming_image_and_max_bytes(llava, size, chunked):
    max_bytes = llava.get("/api/model").json()["image_limits"]["max_bytes"]
    assert max_bytes == MAX_BYTES
    body = f'{{"text": "{TEXT}", "image": "{b64(padded_png(size))}"}}'.encode()
    headers = {"content-type": "application/json"}
    content = iter([body[i : i + 65536] for i in range(0, len(body), 65536)]) if chunked else body
    r = llava.post("/api/attention", content=content, headers=headers)
    assert r.status_code == 413, r.text
    (item,) = r.json()["detail"]
    assert item["loc"] == ["body", "image"]
    assert max_bytes in (item["ctx"]["limit"], item["ctx"].get("max_bytes"))
    assert f"{max_bytes:,}" in item["msg"] and "image" in item["msg"]
    r = llava.post("/api/attention", json={"text": TEXT, "image": b64(padded_png(100)), "top_k": 0})
    assert r.status_code == 200  # and the server keeps serving


def test_other_routes_and_text_only_bodies_keep_the_plain_413(llava):
    r = llava.post("/api/compare-texts", json={"text": "x" * 400_000, "text_b": "y"})
    assert r.status_code == 413
    (item,) = r.json()["detail"]
    assert item["loc"] == ["body"] and "image" not in item["msg"]
