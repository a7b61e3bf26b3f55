"""Request and response models of ``POST /api/knockout``: chosen edges removed before the softmax."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from .common import Index, Prediction, SubjectAnswer
from .subject import Edges, ImagePart, KnockoutEdge, Subject, edges_field


class KnockoutRequest(Subject, ImagePart, Edges):
    """POST /api/knockout: the subject's knocked-out edges (at least one), the log-probability before and after."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "text": "Open the red door, then close the blue window. Open the red door, then close the blue",
                    "edges": [{"layer": 1, "query": 19, "key": 9, "head": 0}],
                },
                {"text": "The cat sat on the mat. The cat", "edges": [{"layer": 0, "query": [4, 8], "key": [0, 2]}]},
            ]
        },
    )
    edges: list[KnockoutEdge] = edges_field(required=True)
    position: Index | None = Field(
        None, description="the position whose log-probability is measured; default the last (an encoder's first mask)"
    )
    token_id: Index | None = Field(
        None, description="the token measured; default the top guess there before the knockout"
    )


class KnockoutResponse(SubjectAnswer):
    tokens: list[str]
    position: int
    token_id: int
    token: str = Field(description="the measured token's display string")
    logprob_before: float = Field(description="log p(token_id) after position, nothing knocked out")
    logprob_after: float = Field(description="log p(token_id) after position with the edges knocked out")
    predictions: list[list[Prediction]] = Field(description="top 5 next tokens after each position, edges knocked out")
    timing_ms: float
