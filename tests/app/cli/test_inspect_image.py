"""``attnscope inspect TEXT --image FILE``: the image goes in as /api/attention's ``image`` (the
JSON is the API's answer to the same text and image); a file that cannot be read or shown is one
line naming --image and exit status 1."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from attnscope.app.cli.main import main  # noqa: E402

from tests.kit.vision import b64, build_llava, image_bytes  # noqa: E402

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    return build_llava(tmp_path_factory.mktemp("cli_vision") / "llava")


@pytest.fixture(scope="module")
def png(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli_png") / "cat.png"
    path.write_bytes(image_bytes(60, 40))
    return path


def test_inspect_json_is_the_api_answer_with_the_image(llava, png, capsysbinary):
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    args = ["inspect", TEXT, "--image", str(png), "--json", "--checkpoint", str(llava), "--device", "cpu"]
    assert main([*args, "--top-k", "2"]) == 0
    cli = capsysbinary.readouterr().out.strip()
    body = {"text": TEXT, "image": b64(png.read_bytes()), "top_k": 2}
    with TestClient(create_app(Settings(checkpoint=llava, device="cpu", torch_threads=1))) as c:
        api = c.post("/api/attention", json=body).content
    assert cli.rsplit(b',"timing_ms":', 1)[0] == api.rsplit(b',"timing_ms":', 1)[0]
    assert "image" in json.loads(cli)["token_kinds"]


def test_inspect_summary_says_the_image(llava, png, capsys):
    assert main(["inspect", TEXT, "--image", str(png), "--checkpoint", str(llava), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "image 60x40: " in out and " image tokens" in out


@pytest.mark.parametrize("what", ["missing", "not an image", "truncated", "to a text model"])
def test_bad_image_file_is_one_line_naming_image(llava, checkpoint_dir, tmp_path, capsys, what):
    path = tmp_path / "bad.png"
    if what == "not an image":
        path.write_text("hello")
    elif what == "truncated":
        path.write_bytes(image_bytes(60, 40)[:300])
    elif what == "to a text model":
        path.write_bytes(image_bytes(20, 20))
    checkpoint = checkpoint_dir if what == "to a text model" else llava
    code = main(["inspect", TEXT, "--image", str(path), "--checkpoint", str(checkpoint), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert len(err.splitlines()) == 1 and f"--image {path}" in err, err
