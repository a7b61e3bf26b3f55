"""Request and response models of the ablation routes: ``POST /api/head-effects`` and
``POST /api/generate`` (strict, unknown fields refused, as in :mod:`app.schemas`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator
from pydantic_core import PydanticCustomError

from .schemas import TEMPERATURE_MAX, TEMPERATURE_MIN, HeadRef, Index, Prediction, ablate_field

MAX_NEW_TOKENS = 256
TOP_GUESSES = 5  # `top` of every streamed line
SEED_MAX = 2**63 - 1


def usable_text(value: str) -> str:
    """Something other than whitespace, and encodable as UTF-8 (no lone surrogate)."""
    if not value.strip():
        raise PydanticCustomError("text_blank", "text must contain something other than whitespace")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise PydanticCustomError(
            "text_encoding", "text contains an unpaired UTF-16 surrogate at character {position}", {"position": e.start}
        ) from None
    return value


class TextRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    text: str = Field(min_length=1, max_length=16000, description="the input, 1..16000 characters")
    ablate: list[HeadRef] = ablate_field()

    @field_validator("text")
    @classmethod
    def _text_is_usable(cls, value: str) -> str:
        return usable_text(value)


class HeadEffectsRequest(TextRequest):
    """POST /api/head-effects."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"text": "Open the red door, then close the blue window. Open the red door, then close the blue"},
                {"text": "The cat sat on the mat. The cat", "position": 3, "token_id": 42, "ablation": "mean"},
            ]
        },
    )
    position: Index | None = Field(None, description="the query position whose prediction is measured; default the last")
    token_id: Index | None = Field(None, description="the target token; default the model's top prediction there")
    ablation: Literal["zero", "mean"] = Field(
        "zero", description="zero: a head's output becomes zeros; mean: its mean output over the text"
    )


class GenerateRequest(TextRequest):
    """POST /api/generate."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"text": "The cat sat on the mat. The cat", "max_new_tokens": 20},
                {"text": "Once upon a time", "do_sample": True, "temperature": 0.8, "top_k": 40, "seed": 7},
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
    top_k: int | None = Field(None, ge=1, description="sample among the top_k tokens only; all if absent")
    seed: int | None = Field(
        None, ge=0, le=SEED_MAX, description="seeds the sampler (the same seed, the same text); drawn if absent"
    )


def with_text_limit(model: type[TextRequest], max_text_chars: int) -> type[TextRequest]:
    """``model`` with the server's text limit (the schema shows it too)."""
    if max_text_chars == 16000:
        return model
    return create_model(
        model.__name__,
        __base__=model,
        __module__=__name__,
        text=(
            str,
            Field(min_length=1, max_length=max_text_chars, description=f"the input, 1..{max_text_chars} characters"),
        ),
    )


# ------------------------------------------------------------------ responses


class HeadEffectsResponse(BaseModel):
    position: int = Field(description="the query position")
    token_id: int
    token: str = Field(description="the target token's display string")
    logprob: float = Field(description="log p(token_id) after position with nothing switched off but `ablate`")
    prob: float = Field(description="exp(logprob)")
    ablation: Literal["zero", "mean"]
    ablate: list[HeadRef] = Field(description="the request's heads switched off in every row, as sent")
    delta: list[list[float]] = Field(
        description="[layer][head]: log-prob of token_id with that head alone (also) switched off, minus logprob"
    )
    timing_ms: float


class GenerateStep(BaseModel):
    """One line of the ``application/x-ndjson`` stream per new token, sent as it is produced."""

    step: int = Field(description="1 for the first new token")
    token: str = Field(description="display string")
    token_id: int
    piece: str = Field(description="the characters this token adds to the text ('' while a character is incomplete)")
    prob: float = Field(description="its probability under softmax(logits / temperature)")
    top: list[Prediction] = Field(description=f"the {TOP_GUESSES} likeliest tokens at this step")
    attention: list[list[list[float]]] = Field(
        description="[layer][head][key]: the pattern row of the position that predicted this token (the one "
        "before it) over every earlier token (prompt + step − 1 keys), rounded like `pattern`"
    )


class GenerateDone(BaseModel):
    """The stream's last line."""

    done: Literal[True]
    text: str = Field(description="the prompt and what was generated")
    reason: Literal["length", "eos", "context"] = Field(
        description="length: max_new_tokens reached; eos: the model's end token; context: the text fills the context"
    )
    tokens: int = Field(description="new tokens generated")
    seed: int | None = Field(description="the sampler's seed (null when greedy)")


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
