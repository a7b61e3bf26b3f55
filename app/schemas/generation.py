"""Request and response models of ``POST /api/generate``: a stream of NDJSON lines, one per new token."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import (
    TEMPERATURE_MAX,
    TEMPERATURE_MIN,
    ImageView,
    Prediction,
    TokenKind,
    optional_field,
)
from .subject import Ablate, ImagePart, Subject

MAX_NEW_TOKENS = 256
TOP_K_SAMPLE_MAX = 2**31 - 1  # any vocabulary is smaller
TOP_GUESSES = 5  # `top` of every streamed line
SEED_MAX = 2**63 - 1


class GenerateRequest(Subject, ImagePart, Ablate):
    """POST /api/generate."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "The cat sat on the mat. The cat", "max_new_tokens": 20},
                {
                    "text": "Once upon a time",
                    "do_sample": True,
                    "temperature": 0.8,
                    "top_k": 40,
                    "top_p": 0.9,
                    "seed": 7,
                },
            ]
        },
    )
    max_new_tokens: int = Field(20, ge=1, le=MAX_NEW_TOKENS, description="tokens to add, 1..256")
    do_sample: bool = Field(False, description="false: greedy (the arg-max token); true: sampled")
    temperature: float = Field(
        1.0,
        ge=TEMPERATURE_MIN,
        le=TEMPERATURE_MAX,
        allow_inf_nan=False,
        description="sampling and every line's probabilities use softmax(logits / temperature)",
    )
    top_k: int | None = Field(
        None,
        ge=1,
        le=TOP_K_SAMPLE_MAX,
        description="sample among the top_k tokens only; all if absent or past the vocabulary",
    )
    top_p: float | None = Field(
        None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description=(
            "sample among the likeliest tokens whose probabilities first add up to top_p (nucleus); all if absent"
        ),
    )
    seed: int | None = Field(
        None, ge=0, le=SEED_MAX, description="seeds the sampler (the same seed, the same text); drawn if absent"
    )


# ------------------------------------------------------------------ responses


class GenerateStep(BaseModel):
    """One line of the ``application/x-ndjson`` stream per new token, sent as it is produced."""

    step: int = Field(description="1 for the first new token")
    token: str = Field(description="display string")
    token_id: int
    piece: str = Field(description="the characters this token adds to the text ('' while a character is incomplete)")
    prob: float = Field(description="its probability under softmax(logits / temperature)")
    top: list[Prediction] = Field(description=f"the {TOP_GUESSES} likeliest tokens at this step")
    attention: list[list[list[float]] | None] = Field(
        description="[layer][head][key]: the pattern row of the position that predicted this token (the one "
        "before it) over every earlier token (prompt + step − 1 keys), rounded like `pattern`; null for a "
        "layer without softmax attention"
    )
    attention_mean: list[float] = Field(
        description="[key]: `attention`'s rows averaged over every attention layer and head (before rounding)"
    )
    token_kinds: list[TokenKind] | None = optional_field(
        "step 1 only, with an image: each prompt token's kind ('text', 'image' or 'marker')"
    )
    image: ImageView | None = optional_field("step 1 only, with an image: its size and each image token's box")


class GenerateDone(BaseModel):
    """The stream's last line."""

    done: Literal[True]
    text: str = Field(description="the prompt and what was generated")
    reason: Literal["length", "eos", "context"] = Field(
        description="length: max_new_tokens reached; eos: the model's end token; context: the text fills the context"
    )
    tokens: int = Field(description="new tokens generated")
    seed: int | None = Field(description="the sampler's seed (null when greedy)")
    do_sample: bool = Field(description="the sampling settings used, echoed: sampled or greedy")
    temperature: float
    top_k: int | None
    top_p: float | None


def ndjson_responses() -> dict[int | str, dict[str, Any]]:
    """The 200 of /api/generate in the OpenAPI schema: a stream of lines."""
    return {
        200: {
            "description": "application/x-ndjson: one GenerateStep line per new token, then one GenerateDone line",
            "content": {
                "application/x-ndjson": {
                    "schema": {"anyOf": [_inline(GenerateStep), _inline(GenerateDone)]},
                }
            },
        }
    }


def _inline(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema for the OpenAPI document, its nested models referred to in components."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return schema
