"""The page on a speech model (a tiny Whisper built in the test, served by the real server): the recording's
field in place of the text box (frontend/js/cards/audiopick.js), a generated WAV picked in it, and the Speech
view (frontend/js/views/speech.js): the spectrogram band over the recording's own frames with the chosen cross
head's rows under it, the words at the server's times, and a click on a word playing the recording from its
start. At 1280 and 390 px."""

from __future__ import annotations

import pytest

from tests.kit.live import post_json, serving, wait_settled

pytest.importorskip("transformers")
pytest.importorskip("soundfile")
pytestmark = pytest.mark.browser

from tests.kit.speech import audio_file, build_whisper  # noqa: E402

TARGET = " The cat sat on the mat."


@pytest.fixture(scope="module")
def speech_server(tmp_path_factory, server):
    with serving(build_whisper(tmp_path_factory.mktemp("whisper") / "whisper"), "whisper") as s:
        yield s


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "clip.wav"
    path.write_bytes(audio_file(3.0, "WAV", seed=21))
    return path


@pytest.mark.parametrize("width", [1280, 390])
def test_a_recording_its_spectrogram_and_its_words(tab, speech_server, wav, width):
    import base64

    tab.base_url = speech_server.url
    page = tab.page
    tab.open_at(width, "/#view=speech")
    assert page.get_by_test_id("audio-field").is_visible() and not page.get_by_test_id("text-input").is_visible()
    page.get_by_test_id("audio-file").set_input_files(str(wav))
    page.wait_for_function("() => window.attnscope.state.audio !== null")
    page.get_by_test_id("target-input").fill(TARGET)
    page.locator("#tab-speech").click()
    page.wait_for_function("() => window.attnscope.state.speech?.response?.words?.length > 0", timeout=120_000)
    wait_settled(page)
    # the spectrogram band and a row per target token, over the recording's own 150 frames
    served = post_json(speech_server.url + "/api/attention", {
        "audio": base64.b64encode(wav.read_bytes()).decode(), "target": TARGET, "stack": "cross",
        "layers": [0], "heads": [0], "include": [], "top_k": 0,
    })
    canvas = page.evaluate("() => { const c = document.querySelector('#speech-canvas'); return [c.width, c.height]; }")
    assert canvas == [served["audio"]["audio_frames"], 120 + 14 * len(served["target_ids"])]
    assert tab.inside("speech-canvas", width)
    # the words at the server's times, left to right
    words = page.get_by_test_id("speech-words").locator("button")
    assert words.all_inner_texts() == [w["word"].strip() for w in served["words"]]
    starts = [float(s) for s in words.evaluate_all("(els) => els.map((e) => e.dataset.start)")]
    assert starts == pytest.approx([w["start"] for w in served["words"]])
    # a click on a word plays the recording from its start
    last = words.last
    last.click()
    page.wait_for_function(
        "(t) => { const p = document.querySelector('#audio-player'); return !p.paused || p.currentTime >= t; }",
        arg=starts[-1],
    )
    assert page.evaluate("() => document.querySelector('#audio-player').currentTime") >= starts[-1] - 0.05
    assert "one row per target token" in page.get_by_test_id("speech-caption").inner_text()
    # the grid of the cross stack marks the alignment heads
    page.locator("#tab-head").click()
    page.get_by_test_id("stack-cross").click()
    page.wait_for_function(
        "() => window.attnscope.state.grid?.response?.stack === 'cross' && window.attnscope.settled", timeout=120_000
    )
    assert "alignment heads" in page.get_by_test_id("grid-caption").inner_text()
    assert not tab.unexpected_console_errors()
