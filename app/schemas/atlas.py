"""The answers of the atlas routes (``GET /api/atlas``, ``GET /api/atlas/heads/{layer}/{head}``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .common import optional_field

Grid = list[list[float | None]]


class AtlasInfo(BaseModel):
    id: str = Field(description="the atlas's folder name: what `atlas` and `compare` name")
    model: str = Field(description="the model the atlas measured")
    corpus: dict[str, Any] = Field(description="the corpus files, their sizes and SHA-256, and the corpus hash")
    tokens: int = Field(description="tokens the atlas saw")
    complete: bool = Field(description="false for a run stopped early (attnscope atlas --resume continues it)")
    metrics: list[str]
    definitions: dict[str, str] = Field(description="what each metric is, per query row")
    layers: list[int] = Field(description="the model's numbers of the layers measured (the maps' rows)")
    n_head: int
    settings: dict[str, Any] = Field(description="seq_len, batch size, local window, ... as the run had them")


class AtlasResponse(BaseModel):
    atlases: list[AtlasInfo]
    atlas: str | None = Field(description="the atlas whose maps these are; null when the server has none")
    layers: list[int]
    maps: dict[str, Grid] = Field(
        description="metric -> [layer][head]: the mean over the corpus; null where not measured"
    )
    compare: str | None = Field(None, description="the atlas subtracted, with `compare`")
    difference: dict[str, Grid] | None = Field(None, description="metric -> [layer][head]: atlas − compare")


class MetricSummary(BaseModel):
    mean: float | None
    std: float | None = Field(description="population standard deviation over the query rows")
    count: int = Field(description="query rows measured")
    histogram: list[int] = Field(description="rows per bin")
    bin_edges: list[float] = Field(description="one more than the bins: bin i is [edges[i], edges[i+1])")


class Exemplar(BaseModel):
    metric: str = Field(description="the metric this context is a top value of")
    value: float
    text: str = Field(description="the tokens around the query, decoded")
    query: int | None = Field(
        description="the query token's index when the served model tokenizes `text`; null if none starts there"
    )
    query_start: int = Field(description="the query token's first character in `text`")
    query_end: int
    token: str = Field(description="the query token as displayed")
    window: int = Field(description="the corpus window it came from")
    position: int = Field(description="the query's position in that window")
    message: int | None = optional_field(
        "a corpus of conversations: the index, in its conversation, of the message the query sits in (absent in the "
        "template's markup)"
    )
    role: Literal["system", "user", "assistant"] | None = optional_field("that message's role")


class AtlasHeadResponse(BaseModel):
    atlas: str
    layer: int
    head: int
    metrics: dict[str, MetricSummary]
    exemplars: list[Exemplar]


class QKPoint(BaseModel):
    kind: str = Field(description="q (a query) or k (a key)")
    x: float
    y: float
    context: int = Field(description="which of `texts`")
    position: int = Field(description="the token's position in its context")
    token: str


class AtlasQKResponse(BaseModel):
    atlas: str
    layer: int
    head: int
    texts: list[str] = Field(description="the head's exemplar contexts, each run through the served model")
    points: list[QKPoint] = Field(
        description="every position's query and key, projected together (keys moved onto the queries' mean)"
    )
    explained: list[float] = Field(description="the share of the variance each of the two axes holds")
