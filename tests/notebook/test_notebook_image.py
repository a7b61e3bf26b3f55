"""``capture(text, image=...)`` and ``show(text, image=...)`` with an image-text model: a PIL image
or a path, laid out as /api/attention lays it out (the same answer); an unreadable path raises at
once, an image the API refuses is the widget's error naming it."""

from __future__ import annotations

import importlib.util
import io

import numpy as np
import pytest

pytestmark = pytest.mark.notebook

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from attnscope.app import notebook  # noqa: E402

from tests.kit.vision import b64, build_llava, image_bytes  # noqa: E402

TEXT = "The cat sat on the mat."
PNG = image_bytes(60, 40)


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    return build_llava(tmp_path_factory.mktemp("nb_vision") / "llava")


@pytest.fixture(scope="module")
def api(llava):
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    with TestClient(create_app(Settings(checkpoint=llava, device="cpu", torch_threads=1))) as c:
        r = c.post("/api/attention", json={"text": TEXT, "image": b64(PNG), "include": ["pattern"], "top_k": 0})
        assert r.status_code == 200
        yield r.json()


@pytest.mark.parametrize("kind", ["pil", "path", "bytes"])
def test_capture_with_an_image_is_the_api_answer(llava, api, tmp_path, kind):
    from PIL import Image

    path = tmp_path / "cat.png"
    path.write_bytes(PNG)
    image = {"pil": Image.open(io.BytesIO(PNG)), "path": path, "bytes": PNG}[kind]
    got = notebook.capture(TEXT, checkpoint=llava, image=image, include=["pattern"], top_k=0)
    assert got["token_ids"] == api["token_ids"] and got["token_kinds"] == api["token_kinds"]
    assert got["image"] == api["image"]
    for layer, want in zip(got["layers"], api["layers"]):
        for head, want_head in zip(layer["heads"], want["heads"]):
            np.testing.assert_allclose(head["pattern"], np.array(want_head["pattern"]), atol=1e-5, rtol=0)


@pytest.mark.skipif(importlib.util.find_spec("anywidget") is None, reason="anywidget not installed")
def test_show_with_an_image(llava, api, tmp_path):
    import json

    path = tmp_path / "cat.png"
    path.write_bytes(PNG)
    w = notebook.show(TEXT, checkpoint=llava, image=str(path))
    assert w.error == ""
    assert json.loads(w.grid)["answer"]["token_kinds"] == api["token_kinds"]
    bad = tmp_path / "bad.png"
    bad.write_text("hello")
    assert "image" in notebook.show(TEXT, checkpoint=llava, image=bad).error
    with pytest.raises(OSError, match="missing.png"):
        notebook.show(TEXT, checkpoint=llava, image=tmp_path / "missing.png")
