"""Request and response models of ``POST /api/head-effects``: each head switched off alone."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from .common import HeadRef, ImageShown, ImageUpload, Index, Spans, Subject, TargetAnswer, TokenKinds, ablate_field


class HeadEffectsRequest(Subject):
    """POST /api/head-effects."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "Open the red door, then close the blue window. Open the red door, then close the blue"},
                {"text": "The cat sat on the mat. The cat", "position": 3, "token_id": 42, "ablation": "mean"},
            ]
        },
    )
    ablate: list[HeadRef] = ablate_field()
    position: Index | None = Field(
        None, description="the query position whose prediction is measured; default the last (an encoder's: its "
        "first mask token)"
    )
    token_id: Index | None = Field(None, description="the target token; default the model's top prediction there")
    ablation: Literal["zero", "mean"] = Field(
        "zero", description="zero: a head's output becomes zeros; mean: its mean output over the text"
    )
    image: ImageUpload = None


class HeadEffectsResponse(TargetAnswer):
    logprob: float = Field(description="log p(token_id) after position with nothing switched off but `ablate`")
    prob: float = Field(description="exp(logprob)")
    ablation: Literal["zero", "mean"]
    ablate: list[HeadRef] = Field(description="the request's heads switched off in every row, as sent")
    delta: list[list[float] | None] = Field(
        description="[layer][head]: log-prob of token_id with that head alone (also) switched off, minus logprob; "
        "null for a layer without softmax attention (a hybrid's other layers)"
    )
    token_kinds: TokenKinds = None
    spans: Spans = None
    image: ImageShown = None
    timing_ms: float
