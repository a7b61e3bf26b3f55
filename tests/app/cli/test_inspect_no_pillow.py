"""``attnscope inspect TEXT --image FILE`` where Pillow is not installed (the README's plain install,
the Docker image before it shipped the vision extra): one line naming ``--image`` and exit status 1,
never a traceback. A text model is refused from its config before the file is even decoded."""

from __future__ import annotations

import sys

import pytest
from attnscope.app.cli.main import main

TEXT = "The cat sat on the mat."
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def no_pillow(monkeypatch):
    """``import PIL`` (and ``from PIL import Image``) fails as it does where Pillow is not installed."""
    for name in [m for m in sys.modules if m == "PIL" or m.startswith("PIL.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "PIL", None)  # None in sys.modules: ModuleNotFoundError on import
    with pytest.raises(ImportError):
        __import__("PIL")


@pytest.fixture
def any_png(tmp_path):
    path = tmp_path / "any.png"
    path.write_bytes(PNG_SIGNATURE + bytes(range(256)))
    return path


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnscope: "), captured.err
    assert captured.out == ""
    return lines[0]


def test_an_image_to_a_text_model_without_pillow_says_text_only(checkpoint_dir, any_png, no_pillow, capsys):
    args = ["inspect", TEXT, "--image", str(any_png), "--checkpoint", str(checkpoint_dir), "--device", "cpu"]
    assert main(args) == 1
    line = one_line(capsys)
    assert f"--image {any_png}: " in line and "reads text only" in line and checkpoint_dir.name in line


def test_an_image_to_a_text_model_is_refused_before_the_file_is_read(checkpoint_dir, tmp_path, capsys, monkeypatch):
    """The model is asked first: a file that is not even there is not the problem."""
    from attnscope.model.vision import images

    def must_not_decode(*args, **kwargs):
        raise AssertionError("the image was decoded for a text model")

    monkeypatch.setattr(images, "decode_image", must_not_decode)
    missing = tmp_path / "none.png"
    assert main(["inspect", TEXT, "--image", str(missing), "--checkpoint", str(checkpoint_dir)]) == 1
    assert "reads text only" in one_line(capsys)


def test_an_image_to_an_image_text_model_without_pillow_names_pillow(tmp_path, any_png, capsys, monkeypatch):
    pytest.importorskip("PIL")
    pytest.importorskip("transformers")
    from tests.kit.vision import build_llava

    llava = build_llava(tmp_path / "llava")  # built with Pillow; hidden only for the command
    capsys.readouterr()  # what building it printed
    for name in [m for m in sys.modules if m == "PIL" or m.startswith("PIL.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "PIL", None)
    assert main(["inspect", TEXT, "--image", str(any_png), "--checkpoint", str(llava), "--device", "cpu"]) == 1
    line = one_line(capsys)
    assert f"--image {any_png}: " in line and "Pillow is not installed" in line and "attnscope[vision]" in line


def test_decode_image_without_pillow_is_an_image_error(no_pillow):
    from attnscope.model.vision.images import ImageError, decode_image

    with pytest.raises(ImageError) as info:
        decode_image(PNG_SIGNATURE, 100)
    assert info.value.kind == "no_pillow" and "Pillow" in str(info.value)
