"""Request and response models of ``POST /api/head-effects``: each head switched off alone."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import (
    HeadRef,
    Index,
    SubjectAnswer,
    TargetAnswer,
    optional_field,
)
from .subject import Ablate, ImagePart, Subject


class HeadEffectsRequest(Subject, ImagePart, Ablate):
    """POST /api/head-effects."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "Open the red door, then close the blue window. Open the red door, then close the blue"},
                {"text": "The cat sat on the mat. The cat", "position": 3, "token_id": 42, "ablation": "mean"},
            ]
        },
    )
    position: Index | None = Field(
        None,
        description="the query position whose prediction is measured; default the last (an encoder's: its "
        "first mask token)",
    )
    token_id: Index | None = Field(None, description="the target token; default the model's top prediction there")
    ablation: Literal["zero", "mean"] = Field(
        "zero", description="zero: a head's output becomes zeros; mean: its mean output over the text"
    )


class ImplicitEffects(BaseModel):
    layer: int
    mixer: str
    delta: list[float] = Field(
        description="[head]: log-prob of token_id with that implicit head switched off, minus logprob"
    )


class HeadEffectsResponse(TargetAnswer, SubjectAnswer):
    logprob: float = Field(description="log p(token_id) after position with nothing switched off but `ablate`")
    prob: float = Field(description="exp(logprob)")
    ablation: Literal["zero", "mean"]
    ablate: list[HeadRef] = Field(description="the request's heads switched off in every row, as sent")
    delta: list[list[float] | None] = Field(
        description="[layer][head]: log-prob of token_id with that head alone (also) switched off, minus logprob; "
        "null for a layer without softmax attention (a hybrid's other layers)"
    )
    implicit: list[ImplicitEffects] | None = optional_field(
        "a hybrid's implicit layers (ablation zero only): each head's slice of the scan's output switched off alone"
    )
    timing_ms: float
