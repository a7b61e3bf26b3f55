"""Recordings in (model/speech/audio.py): WAV, FLAC, OGG/Vorbis and MP3 at 44.1 kHz in stereo are read by
libsndfile, mixed to mono (the channels' mean) and resampled by soxr to the model's rate; bytes that are not
audio, another format, a cut file and a recording longer than the window are each refused with their kind."""

from __future__ import annotations

import io

import numpy as np
import pytest

sf = pytest.importorskip("soundfile")
soxr = pytest.importorskip("soxr")

from attnscope.model.speech.audio import AudioError, decode_audio  # noqa: E402

from tests.kit.speech import audio_file, tones  # noqa: E402

RATE = 16000


@pytest.mark.parametrize("fmt", ["WAV", "FLAC", "OGG", "MP3"])
def test_a_stereo_file_is_its_channels_mean_at_the_models_rate(fmt):
    data = audio_file(1.5, fmt, rate=44100, channels=2, seed=1)
    got = decode_audio(data, RATE, 30.0)
    frames, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    assert (got.source_rate, got.channels, got.format, got.sample_rate) == (44100, 2, fmt, RATE)
    want = soxr.resample(frames.mean(axis=1), rate, RATE)
    assert got.samples.dtype == np.float32 and got.samples.shape == want.shape
    np.testing.assert_allclose(got.samples, want, atol=1e-6)
    assert abs(got.duration - len(frames) / rate) < 1e-3


def test_a_lossless_file_keeps_the_samples_it_was_written_with():
    wave = tones(0.5, rate=RATE, channels=1, seed=2)
    buf = io.BytesIO()
    sf.write(buf, wave, RATE, format="FLAC", subtype="PCM_24")
    got = decode_audio(buf.getvalue(), RATE, 30.0)
    np.testing.assert_allclose(got.samples, wave[:, 0], atol=2**-22)


@pytest.mark.parametrize("fmt", ["WAV", "FLAC", "OGG", "MP3"])
def test_a_cut_file_is_refused_as_truncated(fmt):
    data = audio_file(2.0, fmt)
    with pytest.raises(AudioError) as e:
        decode_audio(data[: len(data) // 2], RATE, 30.0)
    assert e.value.kind == "truncated"


def test_what_is_not_audio_and_what_is_not_listed_are_refused():
    with pytest.raises(AudioError) as e:
        decode_audio(b"RIFF but not a recording at all" * 4, RATE, 30.0)
    assert e.value.kind == "not_audio"
    buf = io.BytesIO()
    sf.write(buf, tones(0.2, rate=8000, channels=1), 8000, format="AIFF")
    with pytest.raises(AudioError) as e:
        decode_audio(buf.getvalue(), RATE, 30.0)
    assert e.value.kind == "format" and "AIFF" in str(e.value)


def test_longer_than_the_window_is_refused_from_the_header():
    data = audio_file(3.0, "WAV", rate=8000, channels=1)
    with pytest.raises(AudioError) as e:
        decode_audio(data, RATE, 2.5)
    assert e.value.kind == "too_long" and e.value.limit == 2.5
    assert decode_audio(data, RATE, 3.0).duration == pytest.approx(3.0, abs=1e-3)
