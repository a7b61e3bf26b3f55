"""Request and response models of ``POST /api/qk-attribution``: why a head attends here."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from .attribution import INDUCTION
from .common import Index, SubjectAnswer, optional_field
from .subject import ImagePart, Subject


class QKAttributionRequest(Subject, ImagePart):
    """POST /api/qk-attribution."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"text": INDUCTION, "layer": 2, "head": 1, "query": 21, "key": 10}]},
    )
    layer: Index = Field(description="the head's layer (an encoder-decoder: in the stack asked, `stack`)")
    head: Index = Field(description="the head (a query head, with grouped-query attention)")
    query: Index = Field(description="the query position")
    key: Index = Field(description="the key position")


class QKAttributionResponse(SubjectAnswer):
    score: float = Field(description="attn_scores_raw[query][key] of the head: q·kᵀ before the divisor and the mask")
    components: list[str] = Field(
        description='the terms adding up to the residual stream entering the layer: "embed", "L{l}H{h}" for each '
        'head of an earlier layer, "L{l}.mlp", and "bias" (every bias and norm offset); an encoder-decoder\'s '
        'decoder adds "L{l}C{h}" for each cross head (of the same layer too, before its cross-attention)'
    )
    matrix: list[list[float]] = Field(
        description="[i][j]: the score between query-side term i and key-side term j, each through the layer's "
        "input norm (scale frozen), the q / k projection, RoPE at its position and any q/k norm (scale frozen); "
        "the entries add up to score"
    )
    key_components: list[str] | None = optional_field(
        "an encoder-decoder's cross stack: the key side's terms, the encoder's (`enc.embed`, `enc.L{l}H{h}`, "
        "`enc.L{l}.mlp`, `enc.bias`) through its final norm (scale frozen); `components` are then the decoder's "
        "and matrix is [query-side term][key-side term]"
    )
    position_bias: float | None = optional_field(
        "a term the layer adds after q·kᵀ (T5's relative position bias, per head and relative position); absent "
        "where the layer adds none"
    )
    attn_scores: float | None = Field(
        description="the score the softmax sees, as the model computed it: score / divisor + position_bias "
        "(softcapped where the model caps); null where masked"
    )
    query_token: str = Field(description="the query's token as the page shows it")
    key_token: str = Field(description="the key's token as the page shows it")
    frozen: str = Field(description="what the split holds fixed, ready for a caption (the norms' scales on this text)")
    masked: bool = Field(
        description="the mask hides this key from this query (a later key, or outside a sliding window): the score "
        "is the q·kᵀ the model computes there, which gets weight 0 (`POST /api/attention` serves it as null)"
    )
    timing_ms: float
