"""Request and response models of ``POST /api/lens``: the logit lens after the embeddings and every block."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import Prediction, SubjectAnswer
from .subject import ImagePart, Subject

LENS_TOP_K_MAX = 20


class LensRequest(Subject, ImagePart):
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
    lens: Literal["logit", "jacobian"] = Field(
        "logit",
        description="logit: the final norm and LM head on the residual stream itself; jacobian: on J_l h_l, the "
        "stream carried to the last block by the Jacobian lens the server loaded (GET /api/model `jlens`)",
    )
    heads: bool = Field(
        False,
        description="also read each head's write into the residual stream (the attribution's per-head write) "
        "through its layer's J: W_U · norm(J_l · write), what the head pushes the model to say later",
    )


class LensResidual(BaseModel):
    after: Literal["embed"] | int = Field(
        description="'embed': the embeddings; a number: that block (Jacobian lens: each source layer, then the last)"
    )
    top: list[list[Prediction]] = Field(
        description="[position][top_k]: the final norm and unembedding applied to the residual stream there"
    )


class HeadRead(BaseModel):
    top: list[list[Prediction]] = Field(description="[position][top_k]: W_U · norm(J_l · the head's write there)")
    final_prob: list[float] = Field(
        description="[position]: the probability that reading gives the model's own top guess there (the last "
        "residual's first token): how much the head's write alone pushes towards the final guess"
    )


class LensResponse(SubjectAnswer):
    tokens: list[str]
    lens: Literal["logit", "jacobian"]
    residuals: list[LensResidual] = Field(
        description="the logit lens: after the embeddings, then after each block; the Jacobian lens: after each of "
        "its source layers, then the last block. The last is the model's own prediction"
    )
    heads: list[list[HeadRead] | None] | None = Field(
        None, description="with heads: true, [layer][head]; null for a layer the Jacobian lens has no J for"
    )
    timing_ms: float
