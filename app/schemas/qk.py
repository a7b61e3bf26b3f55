"""Request and response models of the q · k view, ``POST /api/neuron``:
one query and one key of one head, element by element."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from .common import Index, SubjectAnswer
from .subject import Subject, WhatIfs


class OneHeadRequest(Subject, WhatIfs):
    """What a request about one head of one text holds: the text, the head, the what-ifs."""

    layer: Index = Field(description="the head's layer (an attention layer)")
    head: Index


class QkRequest(OneHeadRequest):
    """POST /api/neuron."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"text": "The cat sat on the mat.", "layer": 1, "head": 0, "query": 5, "key": 1}]
        },
    )
    query: Index | None = Field(None, description="the query position; default the last token")
    key: Index | None = Field(None, description="the key position; default the one the query weighs most")


class QkResponse(SubjectAnswer):
    tokens: list[str]
    layer: int
    head: int
    query: int
    key: int
    q: list[float] = Field(description="the query's vector in this head (after rotary, where the model has it)")
    k: list[float] = Field(description="the key's vector in this head (the key/value head this query head reads)")
    q_times_k: list[float] = Field(description="q ⊙ k, element by element: its sum is attn_scores_raw")
    attn_scores_raw: float | None = Field(description="q·k, the raw score; null where the key is masked for the query")
    divisor: float
    softcap: float | None = Field(description="the layer's softcap, applied after the divisor; null if none")
    attn_scores: float | None = Field(
        description="the score softmax saw (raw / divisor, softcapped where the model does)"
    )
    weight: float = Field(description="the pattern's weight of this key for this query")
    timing_ms: float
