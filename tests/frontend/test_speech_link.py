"""A link on a speech model keeps the recording's key, never the recording (frontend/js/cards/audiopick.js,
subject.js `seq2seqLink`): opened again without it, the field asks for that recording by its key; the same file
dropped again is recognised (the note goes), another one is named as not the link's. The key is the first 12 hex
digits of the file's SHA-256, computed here with hashlib as the oracle."""

from __future__ import annotations

import hashlib

import pytest

from tests.kit.live import serving

pytest.importorskip("transformers")
pytest.importorskip("soundfile")
pytestmark = pytest.mark.browser

from tests.kit.speech import audio_file, build_whisper  # noqa: E402


@pytest.fixture(scope="module")
def speech_server(tmp_path_factory, server):
    with serving(build_whisper(tmp_path_factory.mktemp("whisper") / "whisper"), "whisper") as s:
        yield s


def test_the_link_asks_for_its_recording_by_key(tab, speech_server, tmp_path):
    clips = []
    for seed in (3, 4):
        path = tmp_path / f"clip{seed}.wav"
        path.write_bytes(audio_file(1.0, "WAV", seed=seed))
        clips.append((path, hashlib.sha256(path.read_bytes()).hexdigest()[:12]))
    (mine, key), (other, other_key) = clips
    tab.base_url = speech_server.url
    page = tab.page
    tab.open_at(390, f"/#view=speech&audio={key}")
    # the badge says what the source is, and the model's divisor is √d_k (Whisper's q comes pre-scaled: given back)
    page.wait_for_function("() => !!window.attnscope.state.model")
    badge = page.locator("#model-badge").text_content()  # at 390 px only the name is shown
    assert "recording's frames are the source" in badge and "√d_k" in badge
    note = page.get_by_test_id("audio-link")
    note.wait_for(state="visible")
    assert key in note.inner_text() and "again" in note.inner_text()
    assert f"audio={key}" in page.evaluate("() => window.location.hash")  # kept while not dropped yet
    page.get_by_test_id("audio-file").set_input_files(str(other))
    page.wait_for_function(f"() => window.attnscope.state.audio?.key === '{other_key}'")
    assert "Not the recording" in note.inner_text() and other_key in note.inner_text()
    page.get_by_test_id("audio-file").set_input_files(str(mine))
    page.wait_for_function(f"() => window.attnscope.state.audio?.key === '{key}'")
    note.wait_for(state="hidden")
    page.wait_for_function(f"() => window.location.hash.includes('audio={key}')")
