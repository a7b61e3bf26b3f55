"""Request and response models of the two-texts view, ``POST /api/compare-texts``:
one head on two texts, side by side."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .qk import OneHeadRequest
from .subject import text_field, usable_text


class TwoTextsRequest(OneHeadRequest):
    """POST /api/compare-texts: `text` and `text_b` through the same head."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"text": "The doctor said she", "text_b": "The doctor said he", "layer": 1, "head": 0}]
        },
    )
    text_b: str = text_field()

    @field_validator("text_b")
    @classmethod
    def _text_b_is_usable(cls, value: str) -> str:
        return usable_text(value, "text_b")


class OneText(BaseModel):
    tokens: list[str]
    mask: list[list[int]] = Field(description="T×T, 1 where the query may attend to the key (the layer's own)")
    pattern: list[list[float]] = Field(description="T×T the head's softmax weights; masked cells 0")


class TwoTextsResponse(BaseModel):
    layer: int
    head: int
    texts: list[OneText] = Field(description="the head on `text`, then on `text_b`")
    difference: list[list[float]] | None = Field(
        description="T×T `text_b`'s pattern minus `text`'s, cell by cell; null when the two have different token "
        "counts (then no cell of one is a cell of the other)"
    )
    max_abs_difference: float | None = Field(description="the largest |difference|: the colour range, symmetric")
    why_no_difference: str | None = Field(description="why difference is null")
    timing_ms: float
