"""Request and response models of the two-models view, ``POST /api/compare-models``:
two models' attention on one text."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import Spans
from .subject import Subject


class TwoModelsRequest(Subject):
    """POST /api/compare-models."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"text": "The cat sat on the mat.", "model_b": "ORG/NAME", "layer": 0, "head": 0}]
        },
    )
    model_b: str = Field(
        min_length=1, max_length=1000, description="a model of GET /api/models, loaded beside the served one"
    )
    layer: int = Field(0, ge=0, description="the head whose two patterns come back: its layer")
    head: int = Field(0, ge=0, description="... and its head")


class TwoModelsLoading(BaseModel):
    """The 202 while ``model_b`` loads (ask again)."""

    model_b: str
    status: Literal["loading"]


class TwoModelsResponse(BaseModel):
    model_a: str = Field(description="the served model")
    model_b: str
    tokens: list[str] = Field(description="the text's tokens (both models give the same ids)")
    spans: Spans = None
    divergence: list[list[float] | None] = Field(
        description="[layer][head]: Jensen-Shannon divergence of the two models' rows, bits, mean over queries "
        "(0 to 1); null for a layer without softmax attention"
    )
    max_abs: list[list[float] | None] = Field(description="[layer][head]: the largest |difference| of one weight")
    argmax_agreement: list[list[float] | None] = Field(
        description="[layer][head]: share of query rows whose heaviest key is the same in both models"
    )
    a: list[list[float]] = Field(description="T×T: the chosen head's pattern in the served model (masked 0)")
    b: list[list[float]] = Field(description="T×T: the same head's pattern in model_b")
    difference: list[list[float]] = Field(description="T×T: b − a, weight by weight (0 where masked)")
    mask: list[list[int]] = Field(description="T×T: 1 where the query may attend to the key (the head's layer)")
    timing_ms: float
