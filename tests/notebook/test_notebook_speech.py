"""``capture(audio=...)`` and ``show(audio=...)`` on a tiny Whisper: the numpy answer is the API's (its
audio facts, its words' times), and the widget computes its grid and head for a recording, its text the
target."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("soundfile")

import attnscope  # noqa: E402

from tests.kit.speech import audio_file, build_whisper  # noqa: E402


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    root = tmp_path_factory.mktemp("nbspeech")
    path = root / "clip.flac"
    path.write_bytes(audio_file(2.0, "FLAC", seed=11))
    return build_whisper(root / "whisper"), path


def test_capture_hears_a_recording_as_the_api_does(recording):
    folder, path = recording
    got = attnscope.capture(audio=path, checkpoint=folder, target=" The cat sat.", stack="cross", layers=[1])
    assert got["audio"]["duration"] == pytest.approx(2.0, abs=1e-3)
    pattern = got["layers"][0]["heads"][0]["pattern"]
    assert isinstance(pattern, np.ndarray) and pattern.shape == (len(got["target_ids"]), 1500)
    np.testing.assert_allclose(pattern.sum(-1), 1.0, atol=1e-5)
    assert "".join(w["word"] for w in got["words"]) == " The cat sat."
    assert len(got["token_timestamps"]) == len(got["target_ids"])


def test_show_computes_the_grid_for_a_recording(recording):
    pytest.importorskip("anywidget")
    folder, path = recording
    widget = attnscope.show("", checkpoint=folder, audio=path.read_bytes())
    assert widget.error == ""
    detail = json.loads(widget.detail)["answer"]
    assert detail["target_generated"] is True and detail["audio"]["frames"] == 1500
    widget.text = " The cat"
    assert json.loads(widget.detail)["answer"]["target"] == " The cat"
