"""A bad image is refused on every route that takes one as on /api/attention (a 422 naming
`image` with the same type, 413 over the byte limit) and the server keeps serving; an image sent
to a text-only model is a 422 naming `image` everywhere; the routes that take no image (patching,
the comparisons, selection, neuron) refuse it naming `image`."""

from __future__ import annotations

import pytest

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from tests.kit.app import build_checkpoint  # noqa: E402
from tests.kit.vision import b64, build_llava, image_bytes  # noqa: E402

TEXT = "The cat sat on the mat."
BODIES = {
    "/api/attention": {"top_k": 0},
    "/api/rollout": {},
    "/api/head-effects": {},
    "/api/generate": {"max_new_tokens": 1},
    "/api/lens": {},
    "/api/attribution": {},
    "/api/knockout": {"edges": [{"layer": 0, "query": 1, "key": 0}]},
    "/api/qk-attribution": {"layer": 0, "head": 0, "query": 1, "key": 0},
}
BAD = {
    "not an image": (b"hello, this is text", 422, "image_not_image"),
    "truncated": (image_bytes(60, 40, "PNG")[:300], 422, "image_truncated"),
    "over the pixel limit": (image_bytes(100, 60, "PNG"), 422, "image_too_many_pixels"),
    "over the byte limit": (image_bytes(50, 50, "PNG") + b"\0" * 20000, 413, "image_too_large"),
}


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    root = tmp_path_factory.mktemp("vision_errors")
    limits = dict(max_image_pixels=5000, max_image_bytes=20000)
    vision = Settings(checkpoint=build_llava(root / "llava"), device="cpu", torch_threads=1, **limits)
    text = Settings(checkpoint=build_checkpoint(root / "t"), device="cpu", torch_threads=1)
    with TestClient(create_app(vision)) as a, TestClient(create_app(text)) as b:
        yield {"vision": a, "text": b}


def test_every_image_route_is_listed():
    from attnscope.app.main import image_paths

    assert set(BODIES) == image_paths()


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("url", list(BODIES))
def test_bad_image_is_refused_naming_image(clients, url, case):
    data, status, type_ = BAD[case]
    r = clients["vision"].post(url, json={"text": TEXT, "image": b64(data), **BODIES[url]})
    assert r.status_code == status, r.text
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "image"] and item["type"] == type_
    ok = clients["vision"].post(url, json={"text": TEXT, "image": b64(image_bytes(30, 20)), **BODIES[url]})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("url", list(BODIES))
def test_image_to_a_text_model_is_422_naming_image(clients, url):
    r = clients["text"].post(url, json={"text": TEXT, "image": b64(image_bytes(30, 20)), **BODIES[url]})
    assert r.status_code == 422, r.text
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "image"] and item["type"] == "image_unsupported"
    assert "reads text only" in item["msg"]


@pytest.mark.parametrize(
    "url", ["/api/patching", "/api/compare-models", "/api/compare-texts", "/api/selection", "/api/neuron"]
)
def test_routes_without_image_refuse_it_naming_image(clients, url):
    body = {"text": TEXT, "clean": TEXT, "corrupt": TEXT, "image": b64(image_bytes(30, 20))}
    r = clients["vision"].post(url, json=body)
    assert r.status_code == 422, r.text
    assert ["body", "image"] in [item["loc"] for item in r.json()["detail"]]


def test_an_image_where_pillow_is_missing_is_422_naming_image(clients, monkeypatch):
    """A server installed without Pillow (the vision extra): the image is a 4xx naming it, not a 500,
    and the server keeps serving."""
    import sys

    png = b64(image_bytes(30, 20))
    for name in [m for m in sys.modules if m == "PIL" or m.startswith("PIL.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL fails as where it is not installed
    r = clients["vision"].post("/api/attention", json={"text": TEXT, "image": png, "top_k": 0})
    assert r.status_code == 422, r.text
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "image"] and item["type"] == "image_no_pillow" and "Pillow" in item["msg"]
    monkeypatch.undo()
    ok = clients["vision"].post("/api/attention", json={"text": TEXT, "image": png, "top_k": 0})
    assert ok.status_code == 200, ok.text
