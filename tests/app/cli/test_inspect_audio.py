"""``attnscope inspect --audio FILE``: the recording goes in as /api/attention's ``audio`` (the JSON is the
API's answer to the same recording, its words' times included) and the summary says the recording and its
words; a file the model cannot hear is one line naming --audio and exit status 1."""

from __future__ import annotations

import base64
import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("soundfile")

from attnscope.app.cli.main import main  # noqa: E402

from tests.kit.speech import audio_file, build_whisper  # noqa: E402


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_speech")
    clip = root / "clip.flac"
    clip.write_bytes(audio_file(2.0, "FLAC", seed=17))
    return build_whisper(root / "whisper"), clip


def test_inspect_json_is_the_api_answer_with_the_recording(whisper, capsysbinary):
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    folder, clip = whisper
    args = ["inspect", "--audio", str(clip), "--json", "--checkpoint", str(folder), "--device", "cpu", "--top-k", "2"]
    assert main(args) == 0
    cli = capsysbinary.readouterr().out.strip()
    body = {"audio": base64.b64encode(clip.read_bytes()).decode(), "top_k": 2}
    with TestClient(create_app(Settings(checkpoint=folder, device="cpu", torch_threads=1))) as c:
        api = c.post("/api/attention", json=body).content
    assert cli.rsplit(b',"timing_ms":', 1)[0] == api.rsplit(b',"timing_ms":', 1)[0]
    assert json.loads(cli)["audio"]["duration"] == pytest.approx(2.0, abs=1e-3)


def test_inspect_summary_says_the_recording_and_its_words(whisper, capsys):
    folder, clip = whisper
    assert main(["inspect", "--audio", str(clip), "--checkpoint", str(folder), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "audio 2.00 s, 1500 frames of 0.02 s; words:" in out


def test_a_bad_recording_is_one_line_naming_audio(whisper, checkpoint_dir, tmp_path, capsys):
    folder, _ = whisper
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not a recording at all" * 8)
    assert main(["inspect", "--audio", str(bad), "--checkpoint", str(folder), "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"--audio {bad}" in err and "not a recording" in err
    assert main(["inspect", "--audio", str(bad), "--checkpoint", str(checkpoint_dir), "--device", "cpu"]) == 1
    assert "does not hear" in capsys.readouterr().err
