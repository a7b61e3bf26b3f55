"""An image's base64 as people send it: wrapped in lines (``base64.encodebytes``, GNU ``base64``:
76 columns) it is the same image as unwrapped; any other character outside the alphabet is still a
422."""

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
    from attnscope.app.images import image_bytes as decode

    png = image_bytes(30, 20, "PNG")
    text = wrapped(png)
    assert "\n" in text.rstrip("\n")  # more than one line
    for value in (text, text.replace("\n", "\r\n"), " ".join(b64(png)), "data:image/png;base64,\n" + text):
        assert decode(value, MAX_BYTES) == png


@pytest.mark.parametrize("bad", ["*", "-", "é", "\0"])
def test_other_characters_are_still_not_base64(bad):
    from attnscope.app.errors import ApiError
    from attnscope.app.images import image_bytes as decode

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
