"""Request and response models of ``POST /api/selection``: several tokens' attention, summed or averaged."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from .common import Index, SubjectAnswer
from .qk import OneHeadRequest

MAX_SELECTED = 1024


class SelectionRequest(OneHeadRequest):
    """POST /api/selection."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "The cat sat on the mat. The cat", "layer": 1, "head": 0, "queries": [6, 7], "keys": [1]}
            ]
        },
    )
    queries: list[Index] = Field(
        default_factory=list, max_length=MAX_SELECTED, description="query positions, on the query side"
    )
    keys: list[Index] = Field(
        default_factory=list, max_length=MAX_SELECTED, description="key positions, on the key side"
    )
    reduce: Literal["mean", "sum"] = Field("mean", description="how the selected rows (or columns) are combined")


class SelectionResponse(SubjectAnswer):
    tokens: list[str]
    layer: int
    head: int
    reduce: Literal["mean", "sum"]
    queries: list[int]
    keys: list[int]
    from_queries: list[float] | None = Field(
        description="[key]: the selected queries' rows of the pattern, combined: where they look; null without queries"
    )
    to_keys: list[float] | None = Field(
        description="[query]: the selected keys' columns of the pattern, combined: who looks at them; null without keys"
    )
    timing_ms: float
