"""Request and response models of ``POST /api/lens``: the logit lens after the embeddings and every block."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import ImageShown, ImageUpload, Prediction, TextInput, TokenKinds

LENS_TOP_K_MAX = 20


class LensRequest(TextInput):
    """POST /api/lens."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "Open the red door, then close the blue window. Open the red door, then close the blue"},
                {"text": "The cat sat on the mat. The cat", "top_k": 3},
            ]
        },
    )
    top_k: int = Field(5, ge=1, le=LENS_TOP_K_MAX, description="tokens per position and residual")
    image: ImageUpload = None


class LensResidual(BaseModel):
    after: Literal["embed"] | int = Field(description="'embed': the embeddings; a number: that block")
    top: list[list[Prediction]] = Field(
        description="[position][top_k]: the final norm and unembedding applied to the residual stream there"
    )


class LensResponse(BaseModel):
    tokens: list[str]
    token_kinds: TokenKinds = None
    image: ImageShown = None
    residuals: list[LensResidual] = Field(
        description="after the embeddings, then after each block; the last is the model's own prediction"
    )
    timing_ms: float
