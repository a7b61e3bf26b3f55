"""Request and response models of ``POST /api/patching``: the clean run's pieces written into the corrupt run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator

from .common import Index, Spans, Strict, optional_field
from .subject import (
    TEXT_CHARS,
    Message,
    Stack,
    messages_field,
    one_of,
    stack_field,
    target_field,
    text_field,
    usable_text,
)


class PatchingRequest(Strict):
    """POST /api/patching."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "clean": "Open the red door, then close the blue window. Open the red door, then close the blue",
                    "corrupt": "Open the red door, then close the blue gate. Open the red door, then close the blue",
                },
                {
                    "clean": "The cat sat on the mat. The cat",
                    "corrupt": "The dog sat on the mat. The cat",
                    "what": "residual",
                },
            ]
        },
    )
    clean_messages: list[Message] | None = messages_field()  # each before its text: the text's check sees it
    clean: str | None = text_field(required=False)
    corrupt_messages: list[Message] | None = messages_field()
    corrupt: str | None = text_field(required=False)
    add_generation_prompt: bool | None = Field(None, description="with messages: as on every route")
    stack: Stack = stack_field()
    target: str | None = target_field(
        "an encoder-decoder: the target both sources are read with (`clean` and `corrupt` are then the "
        "two sources), teacher-forced after the decoder start; left out, the model writes it from the clean source"
    )
    position: Index | None = Field(
        None,
        description="where the logit difference is read; default the last position (an encoder's: the first "
        "mask token; an encoder-decoder's: the target's)",
    )
    token_id: Index | None = Field(None, description="default the clean run's top guess at position")
    foil_id: Index | None = Field(
        None, description="default the corrupt run's best guess at position other than token_id"
    )
    what: Literal["heads", "residual"] = Field(
        "heads",
        description="heads: each head's output at every position; residual: the stream after each block per position",
    )

    @field_validator("clean", "corrupt")
    @classmethod
    def _usable(cls, value: str | None, info: ValidationInfo) -> str | None:
        value = one_of(value, info, info.field_name, f"{info.field_name}_messages")
        return None if value is None else usable_text(value, info.field_name)

    @field_validator("target")
    @classmethod
    def _target_is_usable(cls, value: str | None) -> str | None:
        return None if value is None else usable_text(value, "target")


def with_pair_limit(max_text_chars: int) -> type[PatchingRequest]:
    """:class:`PatchingRequest` with the server's text limit on both texts."""
    if max_text_chars == TEXT_CHARS:
        return PatchingRequest
    texts = {name: (str | None, text_field(max_text_chars, required=False)) for name in ("clean", "corrupt")}
    return create_model("PatchingRequest", __base__=PatchingRequest, __module__=__name__, **texts)


class Guess(BaseModel):
    token_id: int
    token: str


class PatchingResponse(BaseModel):
    tokens: list[str] = Field(description="the clean text's tokens")
    corrupt_tokens: list[str]
    spans: Spans = None
    corrupt_spans: Spans = None
    source_tokens: list[str] | None = optional_field(
        "an encoder-decoder: the clean source's tokens (`tokens` and `corrupt_tokens` are then the one target's)"
    )
    corrupt_source_tokens: list[str] | None = optional_field("an encoder-decoder: the corrupt source's tokens")
    target: str | None = optional_field("an encoder-decoder: the target's text, as sent or as the model wrote it")
    target_generated: bool | None = optional_field("an encoder-decoder: whether the model wrote the target")
    position: int
    token_id: int
    token: str
    foil_id: int
    foil: str
    clean_top: list[Guess] = Field(description="the clean run's top guesses at position, best first")
    corrupt_top: list[Guess] = Field(description="the corrupt run's, best first")
    clean_diff: float = Field(description="logit(token_id) − logit(foil_id) at position, clean run")
    corrupt_diff: float = Field(description="the same, corrupt run")
    what: Literal["heads", "residual"]
    heads: list[list[float] | None] | None = optional_field(
        "[layer][head]: (patched − corrupt_diff) / (clean_diff − corrupt_diff) with that head's clean output "
        "written in; null for a layer without softmax attention. An encoder-decoder: the heads of `stack` (the "
        "encoder's, the decoder's self heads or its cross heads)"
    )
    residual: list[list[float]] | None = optional_field(
        "[layer][position]: the same with the clean residual stream after that block at that position written in "
        "(an encoder-decoder: the decoder's blocks, at target positions)"
    )
    timing_ms: float
