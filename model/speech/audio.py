"""An uploaded recording's bytes -> mono samples at the model's rate, or :class:`AudioError` saying why not.

libsndfile (through ``soundfile``) reads WAV, FLAC, OGG/Vorbis (and Opus) and MP3; ``soxr`` resamples.
Nothing here decodes or resamples by hand. The length comes from the header before any sample is
decoded, so a recording longer than the window is refused unread. A truncated file is refused: where
libsndfile reads on past a cut (a WAV's or an Ogg's), its own log says the header promised more.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

FORMATS = {"WAV": "WAV", "WAVEX": "WAV", "RF64": "WAV", "FLAC": "FLAC", "OGG": "OGG", "MP3": "MP3"}
LISTED = "WAV, FLAC, OGG/Vorbis or MP3"
SPEECH_TYPES = ("whisper",)  # the config model_types opened as speech-to-text encoder–decoders
# libsndfile's log (SoundFile.extra_info) on a file cut short: a WAV's chunk sizes, an Ogg stream's last page
TRUNCATION_SIGNS = ("(should be", "lacks an end-of-stream bit")


class AudioError(ValueError):
    """Bytes that cannot be heard as a recording; ``kind`` says which check refused them."""

    def __init__(self, msg: str, kind: str, limit: float | None = None) -> None:
        super().__init__(msg)
        self.kind = kind  # "not_audio", "format", "too_long", "truncated", "empty", "no_soundfile"
        self.limit = limit


@dataclass
class Recording:
    """A decoded recording: mono ``samples`` (float32) at ``sample_rate``, and what the file was."""

    samples: np.ndarray
    sample_rate: int
    format: str  # WAV, FLAC, OGG or MP3
    source_rate: int  # the file's own sample rate
    channels: int  # the file's own channels (mixed to one)

    @property
    def duration(self) -> float:
        return len(self.samples) / self.sample_rate


def hears(config: dict) -> bool:
    """Whether a checkpoint's ``config.json`` is a speech-to-text model's (Whisper, Distil-Whisper)."""
    return config.get("model_type") in SPEECH_TYPES


def _libraries():
    try:
        import soundfile
        import soxr
    except ImportError as e:
        msg = "audio cannot be read: soundfile and soxr are not installed here (pip install 'attnscope[audio]')"
        raise AudioError(msg, "no_soundfile") from e
    return soundfile, soxr


def decode_audio(data: bytes, sample_rate: int, max_seconds: float) -> Recording:
    """``data`` (a WAV, FLAC, OGG/Vorbis or MP3 file) -> its channels' mean, resampled to ``sample_rate``;
    :class:`AudioError` for bytes that are not audio, another format, a cut file, none or over ``max_seconds``."""
    sf, soxr = _libraries()
    try:
        f = sf.SoundFile(io.BytesIO(data))  # reads the header only
    except (sf.SoundFileError, RuntimeError, TypeError) as e:
        raise AudioError(f"audio is not a recording libsndfile can read ({LISTED})", "not_audio") from e
    with f:
        kind = FORMATS.get(f.format)
        if kind is None:
            raise AudioError(f"audio is {f.format} ({f.format_info}); send {LISTED}", "format")
        declared, rate, channels = f.frames, f.samplerate, f.channels
        if rate <= 0 or declared > max_seconds * rate:
            msg = f"audio is {declared / max(rate, 1):.2f} s long; the model hears at most {max_seconds:g} s at once"
            raise AudioError(msg + " (cut a longer recording into windows)", "too_long", max_seconds)
        try:
            frames = f.read(dtype="float32", always_2d=True)
        except (sf.SoundFileError, RuntimeError) as e:
            raise AudioError(f"audio could not be decoded: {' '.join(str(e).split())[:120]}", "truncated") from e
        log = f.extra_info
    if len(frames) < declared or any(sign in log for sign in TRUNCATION_SIGNS):
        raise AudioError(f"audio is cut short: its header promises more than the file holds ({kind})", "truncated")
    if len(frames) == 0:
        raise AudioError("audio holds no samples", "empty")
    mono = frames.mean(axis=1)
    if rate != sample_rate:
        mono = soxr.resample(mono, rate, sample_rate)
    return Recording(np.ascontiguousarray(mono, dtype=np.float32), sample_rate, kind, rate, channels)
