"""Request and response models of ``POST /api/attribution``: direct logit attribution."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from .common import Index, SubjectAnswer, TargetAnswer, optional_field
from .subject import ImagePart, Subject

INDUCTION = "Open the red door, then close the blue window. Open the red door, then close the blue"


class AttributionRequest(Subject, ImagePart):
    """POST /api/attribution."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": INDUCTION},
                {"text": "The cat sat on the mat. The cat", "position": 3, "token_id": 42},
            ]
        },
    )
    position: Index | None = Field(
        None, description="the position whose next-token logit is split; default the last (an encoder-decoder: the "
        "target's, whichever the stack)"
    )
    token_id: Index | None = Field(None, description="the token whose logit is split; default the top guess there")


class AttributionResponse(TargetAnswer, SubjectAnswer):
    logit: float = Field(description="the LM head's logit of token_id at position (before any final softcap)")
    heads: list[list[float] | None] = Field(
        description="[layer][head]: what the head writes into the residual stream, through the final norm "
        "(scale frozen) and the token's unembedding row; null for a layer without heads"
    )
    cross_heads: list[list[float]] | None = optional_field(
        "an encoder-decoder: [decoder layer][head], each cross-attention head's write the same way (its slice of "
        "the output projection); the encoder's whole work enters the decoder only through these. `heads` are then "
        "the decoder's self-attention heads"
    )
    mlps: list[float] = Field(description="[layer]: each MLP's write the same way (a mixture of experts: one MLP)")
    mixers: list[float | None] = Field(
        description="[layer]: a hybrid's mixer layer's write the same way, one component (not split per head); "
        "null on a softmax layer"
    )
    unsplit: str | None = Field(
        description="which mixer layers' writes are one component each, ready for a caption; null without mixers"
    )
    embed: float = Field(description="the token and position embeddings' part")
    rest: float = Field(description="the output projections' biases, the final norm's offset and the LM head's bias")
    frozen: str = Field(description="what the split holds fixed, ready for a caption (the norms' scales on this text)")
    final_softcap: float | None = Field(
        description="the model's final logit softcap (Gemma 2): logits are shown as cap·tanh(logit/cap); "
        "the logit split here is the one before it. null without one"
    )
    timing_ms: float
