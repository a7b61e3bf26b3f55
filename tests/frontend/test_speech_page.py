"""The page on a speech model (a tiny Whisper built in the test, served by the real server): the recording's
field in place of the text box (frontend/js/cards/audiopick.js), a generated WAV picked in it, and the Speech
view (frontend/js/views/speech.js): the waveform band over the spectrogram band over the recording's own frames
with the chosen cross head's rows under it, the words at the server's times, and a click on a word playing the
recording from its start. At 1280 and 390 px; at 1280 the rows switched to the alignment heads' mean."""

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


# per canvas row in [a, b): per column whether it is painted the waveform's colour
LIT = """([a, b]) => { const c = document.querySelector('#speech-canvas');
  const d = c.getContext('2d').getImageData(0, a, c.width, b - a).data;
  return Array.from({length: b - a}, (_, y) => Array.from({length: c.width},
    (_, x) => d[4 * (y * c.width + x)] === 0x9f && d[4 * (y * c.width + x) + 2] === 0xff)); }"""

# per target row, the column of its brightest pixel and its red channel there
BRIGHTEST = """([top, rows]) => { const c = document.querySelector('#speech-canvas'); const ctx = c.getContext('2d');
  return Array.from({length: rows}, (_, r) => { const d = ctx.getImageData(0, top + r * 14 + 7, c.width, 1).data;
    let best = 0; for (let x = 0; x < c.width; x++) if (d[4 * x] > d[4 * best]) best = x;
    return [best, d[4 * best]]; });
}"""


def rows_are_the_mean(page, rows):
    """Switched to the alignment heads' mean, each row is brightest where the served mean is largest."""
    page.get_by_test_id("speech-rows").select_option("mean")
    page.wait_for_function("() => window.attnscope.state.speech?.response?.alignment_mean", timeout=120_000)
    wait_settled(page)
    answer = page.evaluate("() => window.attnscope.state.speech.response")
    frames = answer["audio"]["audio_frames"]
    got = page.evaluate(BRIGHTEST, [160, rows])
    for (x, red), row in zip(got, answer["alignment_mean"]):
        assert red == 255 and row[x] == max(row[:frames])
    assert "alignment heads' mean" in page.get_by_test_id("speech-caption").inner_text()
    page.get_by_test_id("speech-rows").select_option("head")
    head_rows = "() => window.attnscope.state.speech?.response?.layers?.[0]?.heads?.[0]?.pattern"
    page.wait_for_function(head_rows, timeout=120_000)
    wait_settled(page)


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
    # the waveform and spectrogram bands and a row per target token, over the recording's own 150 frames
    served = post_json(speech_server.url + "/api/attention", {
        "audio": base64.b64encode(wav.read_bytes()).decode(), "target": TARGET, "stack": "cross",
        "layers": [0], "heads": [0], "include": [], "top_k": 0,
    })
    canvas = page.evaluate("() => { const c = document.querySelector('#speech-canvas'); return [c.width, c.height]; }")
    assert canvas == [served["audio"]["audio_frames"], 40 + 120 + 14 * len(served["target_ids"])]
    assert tab.inside("speech-canvas", width)
    # the waveform band: each column lit from its max to its min about the middle, dark where no column reaches
    lit = page.evaluate(LIT, [0, 40])
    assert any(lit[20]) and not all(lit[0]) and sum(map(sum, lit)) > len(lit[0])
    if width == 1280:
        rows_are_the_mean(page, len(served["target_ids"]))
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
