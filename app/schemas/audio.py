"""A speech model's recording in a request (``audio``) and what an answer adds for it (``audio``,
``token_timestamps``, ``words``); :mod:`.common` composes them into the subject and its answer."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


# a request's ``audio`` (``audio: AudioUpload = None``)
AudioUpload = Annotated[
    str | None,
    Field(
        description="a speech model only (Whisper): WAV, FLAC, OGG/Vorbis or MP3 bytes as base64 or a data: URL, "
        "at most the model's window (/api/model audio_limits); mixed to mono and resampled to the model's rate, "
        "it is the source the encoder hears",
    ),
]


class Waveform(BaseModel):
    seconds_per_column: float = Field(description="a column's length in seconds (the last column may be shorter)")
    min: list[float] = Field(description="[columns]: each column's least mono sample at the model's rate")
    max: list[float] = Field(description="[columns]: each column's greatest mono sample at the model's rate")


class AudioView(BaseModel):
    duration: float = Field(description="the recording's length in seconds")
    sample_rate: int = Field(description="the rate the model hears at (the feature extractor's), in Hz")
    frames: int = Field(description="the encoder's positions over the model's window (Whisper: 1,500)")
    seconds_per_frame: float = Field(description="an encoder position's length in seconds (Whisper: 0.02)")
    audio_frames: int = Field(description="the encoder positions the recording itself fills (the rest is padding)")
    spectrogram: list[list[float]] | None = Field(
        None,
        description="with `spectrogram: true`: the log-mel features pooled to [bin][frame], one column per encoder "
        "frame, the lowest band first",
        json_schema_extra=_no_default,
    )
    waveform: Waveform | None = Field(
        None,
        description="with `spectrogram: true`: the mono samples pooled to at most 1,000 columns from 0 s, each "
        "column's min and max",
        json_schema_extra=_no_default,
    )


class Word(BaseModel):
    word: str = Field(description="as the tokenizer decodes it (a leading space kept)")
    start: float = Field(description="seconds: the time of the token before its first")
    end: float = Field(description="seconds: its last token's time")
    tokens: list[int] = Field(description="[a, b]: the word's half-open range of target positions")


# what an answer adds with audio (``audio: AudioShown = None``, ``token_timestamps``, ``words``)
AudioShown = Annotated[
    AudioView | None,
    Field(description="with audio: the recording and the encoder's frames in seconds", json_schema_extra=_no_default),
]
TokenTimestamps = Annotated[
    list[float] | None,
    Field(
        description="with audio: [len(target_ids)], each target token's time in seconds from the alignment heads "
        "by dynamic time warping (transformers' _extract_token_timestamps on the same cross-attention)",
        json_schema_extra=_no_default,
    ),
]
AlignmentMean = Annotated[
    list[list[float]] | None,
    Field(
        description="with audio and `alignment_mean: true`: [len(target_ids)][source frames], the mean of the "
        "alignment heads' cross-attention patterns in the pass that times the words",
        json_schema_extra=_no_default,
    ),
]
Words = Annotated[
    list[Word] | None,
    Field(description="with audio: the target's words and their times", json_schema_extra=_no_default),
]
