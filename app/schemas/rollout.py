"""Request and response models of ``POST /api/rollout``: attention rollout for one token."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from .common import Index, SubjectAnswer
from .subject import ImagePart, Subject, WhatIfs

ROLLOUT_MAX_TOKENS = 1024  # each layer multiplies two T×T matrices: T³ operations


class RolloutRequest(Subject, ImagePart, WhatIfs):
    """POST /api/rollout."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "The cat sat on the mat. The cat"},
                {"text": "The doctor said she", "position": 3, "residual": False},
            ]
        },
    )
    position: Index | None = Field(None, description="the token whose rollout is sent; default the last")
    residual: bool = Field(
        True,
        description=(
            "true: each layer's map is 0.5·attention + 0.5·I, rows renormalised (the paper's); false: attention alone"
        ),
    )


class RolloutResponse(SubjectAnswer):
    tokens: list[str]
    position: int = Field(description="the token whose rollout this is")
    residual: bool
    layers: list[int] = Field(description="the attention layers, by the model's numbers, in order")
    rollout: list[list[float]] = Field(
        description="[layer][token]: how much the position's representation after that layer draws on each input "
        "token (Abnar & Zuidema): row `position` of Â_l ⋯ Â_1, Â the layer's attention averaged over its heads"
    )
    timing_ms: float
