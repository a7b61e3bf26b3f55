"""A recording as the model hears it: the log-mel features of the model's own ``WhisperFeatureExtractor``,
padded to its window, and what the answer says of the audio (its frames' times, a pooled spectrogram)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .audio import Recording

SPECTROGRAM_BINS = 40  # mel bins of the spectrogram the answer sends (the model's, averaged in groups)
WAVEFORM_COLUMNS = 1000  # at most this many columns of the waveform the answer sends


@dataclass
class Heard:
    """One recording's features: ``features`` (1, mel bins, window frames), ``num_frames`` of them its own."""

    features: torch.Tensor
    num_frames: int  # mel frames the audio itself fills (the feature extractor's attention mask)
    recording: Recording


class Ear:
    """The model's feature extractor, and the encoder's positions in seconds."""

    def __init__(self, extractor, frames: int) -> None:
        self.extractor = extractor
        self.frames = frames  # the encoder's positions over the window (Whisper: 1,500)

    @property
    def sample_rate(self) -> int:
        return int(self.extractor.sampling_rate)

    @property
    def max_seconds(self) -> float:
        return float(self.extractor.n_samples / self.extractor.sampling_rate)

    @property
    def seconds_per_frame(self) -> float:
        return self.max_seconds / self.frames

    def hear(self, recording: Recording, dtype: torch.dtype, device: torch.device) -> Heard:
        got = self.extractor(
            recording.samples, sampling_rate=self.sample_rate, return_tensors="pt", return_attention_mask=True
        )
        mask = got["attention_mask"]
        features = got["input_features"].to(device=device, dtype=dtype)
        return Heard(features, int(mask.sum()), recording)

    def source_tokens(self) -> list[str]:
        """Each encoder position's time, as its label: ``"0.00s"``, ``"0.02s"``, ..."""
        return [f"{i * self.seconds_per_frame:.2f}s" for i in range(self.frames)]

    def about(self, heard: Heard, with_spectrogram: bool = False) -> dict[str, Any]:
        """The answer's ``audio``: the recording's duration and the encoder's frames in seconds (and, asked,
        the pooled spectrogram and waveform)."""
        rec = heard.recording
        got = {
            "duration": round(rec.duration, 4),
            "sample_rate": rec.sample_rate,
            "frames": self.frames,
            "seconds_per_frame": self.seconds_per_frame,
            "audio_frames": min(self.frames, heard.num_frames // 2),
        }
        if with_spectrogram:
            got["spectrogram"] = spectrogram(heard.features, self.frames)
            got["waveform"] = waveform(rec.samples, rec.sample_rate)
        return got


def spectrogram(features: torch.Tensor, frames: int) -> list[list[float]]:
    """The log-mel features pooled to one column per encoder frame and :data:`SPECTROGRAM_BINS` rows, the
    lowest band first: ``[bin][frame]``, rounded to 2 decimals (Whisper's features lie in about [-1, 1.5])."""
    mel = features[0].float().cpu().numpy()  # (mel bins, window frames)
    bins, width = mel.shape
    group = max(1, bins // SPECTROGRAM_BINS)
    pooled = mel[: bins - bins % group].reshape(-1, group, width).mean(axis=1)
    cols = width // frames
    pooled = pooled[:, : cols * frames].reshape(pooled.shape[0], frames, cols).mean(axis=2)
    return np.round(pooled, 2).tolist()


def waveform(samples: np.ndarray, rate: int, columns: int = WAVEFORM_COLUMNS) -> dict[str, Any]:
    """The mono samples pooled to at most ``columns`` columns of ``per`` samples each (the last maybe fewer):
    ``{"seconds_per_column", "min", "max"}``, each column's least and greatest sample, 4 decimals."""
    n = len(samples)
    per = max(1, -(-n // columns))  # ceil: samples per column
    count = -(-n // per)
    padded = np.concatenate([samples, np.full(count * per - n, np.nan, dtype=np.float32)]).reshape(count, per)
    return {
        "seconds_per_column": per / rate,
        "min": np.round(np.nanmin(padded, axis=1), 4).tolist(),
        "max": np.round(np.nanmax(padded, axis=1), 4).tolist(),
    }
