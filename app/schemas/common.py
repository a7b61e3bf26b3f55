"""What the request and response models of several resources share.

Requests are strict (a JSON string is not an int, ``1`` is not ``true``) and refuse unknown
fields (:class:`Strict`), so a typo is an error instead of a silently ignored option. A request
about a text or a conversation derives from :class:`Subject` (``text`` or ``messages``): the text
is checked to hold something other than whitespace and to be valid UTF-8, and
:func:`with_text_limit` gives the model the server's longest text (the OpenAPI schema shows it too).

Responses are built as numpy arrays and encoded by orjson; the response models only
document their shape in the OpenAPI schema (and the schema tests check the bodies against them).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator
from pydantic_core import PydanticCustomError

from ...model.families.mixers import MEANINGS
from .audio import AlignmentMean, AudioShown, AudioUpload, TokenTimestamps, Words

TEXT_CHARS = 16000  # the longest text when the server's settings do not say otherwise
TEMPERATURE_MIN, TEMPERATURE_MAX = 1e-2, 1e2
MAX_ABLATE = 1024  # longest `ablate` list
MAX_MESSAGES = 256  # most turns in a conversation

Index = Annotated[int, Field(ge=0)]


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def optional_field(description: str, **kwargs: Any) -> Any:
    """A response field present only when asked for (absent, never null)."""
    return Field(None, description=description, json_schema_extra=_no_default, **kwargs)


def text_field(max_chars: int = TEXT_CHARS, required: bool = True) -> Any:
    return Field(
        ... if required else None,
        validate_default=not required,  # an optional text: its check runs when it is left out too
        min_length=1,
        max_length=max_chars,
        description=f"the input, 1..{max_chars} characters" + ("" if required else "; or `messages` instead"),
    )


class Strict(BaseModel):
    """A request model: strict types, unknown fields refused."""

    model_config = ConfigDict(strict=True, extra="forbid")


class Message(Strict):
    """One turn of a conversation."""

    role: Literal["system", "user", "assistant"] = Field(description="who speaks: system, user or assistant")
    content: str = Field(max_length=TEXT_CHARS, description="what the turn says")

    @field_validator("content")
    @classmethod
    def _content_is_utf8(cls, value: str) -> str:
        return encodable(value, "content")


def messages_field() -> Any:
    return Field(
        None,
        min_length=1,
        max_length=MAX_MESSAGES,
        description="a conversation instead of `text` (a chat model only: /api/model `chat`): laid out by the "
        f"model's own chat template; 1..{MAX_MESSAGES} turns",
    )


Stack = Literal["encoder", "decoder", "cross"] | None


def stack_field() -> Any:
    return Field(
        None,
        description="the attention stack looked at (/api/model `stacks`); default: `decoder` where the model has "
        "one, else `encoder`. A stack the model lacks is a 422 naming `stack`",
    )


class Subject(Strict):
    """What a request looks at, read the same way by every route (:mod:`attnscope.app.subject`
    resolves it): ``text`` or ``messages`` (exactly one), ``add_generation_prompt`` and ``stack``. A route whose
    request takes an image adds ``image``; a part a route does not take is refused as unknown. ``audio`` (a
    speech model's recording) replaces ``text`` and ``messages``."""

    audio: AudioUpload = None  # before text: text's check sees it
    messages: list[Message] | None = messages_field()  # before text: text's check sees it
    text: str | None = text_field(required=False)
    add_generation_prompt: bool | None = Field(
        None,
        description="with `messages`: end the prompt with the template's opening of the assistant's turn; default: "
        "true unless the last message is the assistant's",
    )
    stack: Stack = stack_field()
    target: str | None = Field(
        None,
        min_length=1,
        max_length=TEXT_CHARS,
        description="an encoder-decoder's target: the decoder's text, teacher-forced after the model's decoder "
        "start; left out, the model writes one greedily (at most 32 tokens, as `generate()`) and the answer says "
        "`target_generated`. A 422 naming `target` on a model without a decoder over a source",
    )

    @field_validator("text")
    @classmethod
    def _text_is_usable(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("audio") is not None:  # a recording is the whole source
            if value is not None or info.data.get("messages") is not None:
                raise PydanticCustomError("subject_both", "send audio, or text or messages, not both")
            return None
        value = one_of(value, info, "text", "messages")
        return None if value is None else usable_text(value, "text")

    @field_validator("target")
    @classmethod
    def _target_is_usable(cls, value: str | None) -> str | None:
        return None if value is None else usable_text(value, "target")


def one_of(value: Any, info: ValidationInfo, name: str, other: str) -> Any:
    """``name`` (validated after ``other``): exactly one of the two given; else the error names ``name``."""
    if other not in info.data:  # the other failed its own checks: its error says enough
        return value
    if value is not None and info.data[other] is not None:
        raise PydanticCustomError("subject_both", f"send {name} or {other}, not both")
    if value is None and info.data[other] is None:
        raise PydanticCustomError("missing", f"Field required ({name}, or {other} instead)")
    return value


def usable_text(value: str, name: str) -> str:
    """Something other than whitespace, and encodable as UTF-8 (no lone surrogate); else the error names ``name``."""
    if not value.strip():
        raise PydanticCustomError("text_blank", f"{name} must contain something other than whitespace")
    return encodable(value, name)


def encodable(value: str, name: str) -> str:
    """``value`` encodable as UTF-8 (no lone surrogate); else the error names ``name``."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise PydanticCustomError(
            "text_encoding",
            f"{name} contains an unpaired UTF-16 surrogate at character {{position}}",
            {"position": e.start},
        ) from None
    return value


TextModel = TypeVar("TextModel", bound=Strict)


def with_text_limit(model: type[TextModel], max_text_chars: int) -> type[TextModel]:
    """``model`` with the server's text limit (the schema shows it too)."""
    if max_text_chars == TEXT_CHARS:
        return model
    texts = {
        name: (str, text_field(max_text_chars))
        if model.model_fields[name].is_required()
        else (str | None, text_field(max_text_chars, required=False))
        for name in ("text", "text_b")
        if name in model.model_fields
    }
    return create_model(model.__name__, __base__=model, __module__=model.__module__, **texts)


class HeadRef(Strict):
    """One head: ``{"layer", "head"}``, 0-based."""

    layer: Index
    head: Index


def ablate_field() -> Any:
    return Field(
        default_factory=list,
        max_length=MAX_ABLATE,
        description="heads switched off: each one's output (its pattern applied to v) is replaced by zeros "
        "before the layer's output projection, in every position; later layers and the predictions follow",
    )


# a request's ``image`` (``image: ImageUpload = None``)
ImageUpload = Annotated[
    str | None,
    Field(
        description="an image-text model only: PNG, JPEG, WebP or GIF bytes as base64 or a data: URL; the prompt is "
        "then laid out as the model's processor and chat template lay it out (the image, then the text)",
    ),
]


# ------------------------------------------------------------------ responses


class ImageView(BaseModel):
    width: int = Field(description="the uploaded image's width in its own pixels")
    height: int
    boxes: list[list[float]] = Field(
        description="for each token of kind 'image', in token order, [x0, y0, x1, y1]: the region of the uploaded "
        "image (its own pixels) whose features the token carries, through the processor's resize, crop, pooling "
        "or patch merge"
    )
    seen: list[float] | None = optional_field(
        "[x0, y0, x1, y1]: the part of the uploaded image the model saw, the smallest rectangle holding every image "
        "token's box (less than the whole image where the processor centre-crops, as LLaVA's does)"
    )


TokenKind = Literal["text", "image", "marker"]


class Span(BaseModel):
    """Where one message of a conversation sits in the prompt."""

    message: int = Field(description="the message's index in `messages`")
    role: Literal["system", "user", "assistant"]
    start: int = Field(description="its first content token")
    end: int = Field(description="one past its last content token (start = end: a message with no tokens)")


# what an answer adds with a conversation (``spans: Spans = None``)
Spans = Annotated[
    list[Span] | None,
    Field(
        description="with `messages`: for each message the half-open token range of its content; the template's "
        "markup is outside every span (token kind 'marker')",
        json_schema_extra=_no_default,
    ),
]


# what an answer adds with an image (``token_kinds: TokenKinds = None``, ``image: ImageShown = None``)
TokenKinds = Annotated[
    list[TokenKind] | None,
    Field(
        description="with an image or messages: per token 'text', 'image' (carries image features) or 'marker' (begin "
        "or end of the image; a chat template's markup)",
        json_schema_extra=_no_default,
    ),
]
ImageShown = Annotated[
    ImageView | None,
    Field(description="with an image: its size and each image token's box", json_schema_extra=_no_default),
]


class TargetAnswer(BaseModel):
    """The start of an answer about one token at one position (its logit or log-probability)."""

    position: int = Field(description="the query position")
    token_id: int
    token: str = Field(description="the target token's display string")


class ErrorItem(BaseModel):
    type: str
    loc: list[str | int] = Field(description="where: 'body' then the field name (and index)")
    msg: str
    ctx: dict[str, Any] | None = optional_field("the limit and other values the message refers to")


class ErrorResponse(BaseModel):
    detail: str | list[ErrorItem]


class TypedArray(BaseModel):
    """A matrix in ``encoding: "b64"``: decode with ``np.frombuffer(base64.b64decode(bdata), dtype)``
    and reshape to ``shape`` ("rows, cols"); the form Plotly.js reads (f2 it does not)."""

    dtype: Literal["u1", "f2", "f4"]
    bdata: str
    shape: str


Matrix = list[list[float]] | TypedArray


class Prediction(BaseModel):
    token: str
    id: int
    prob: float = Field(ge=0, le=1)


class SubjectAnswer(BaseModel):
    """What an answer adds for its subject, on every route that answers about tokens: ``token_kinds`` and
    ``image`` with an image, ``token_kinds`` and ``spans`` with a conversation (absent for a plain text). A
    new part of the subject adds its answer's fields here, once."""

    token_kinds: TokenKinds = None
    spans: Spans = None
    image: ImageShown = None
    audio: AudioShown = None
    token_timestamps: TokenTimestamps = None
    words: Words = None
    alignment_mean: AlignmentMean = None
    # an encoder-decoder's two sides (`tokens` / `token_ids` are the stack's query side)
    source_tokens: list[str] | None = optional_field("an encoder-decoder: the source's (the text's) tokens")
    target_tokens: list[str] | None = optional_field("an encoder-decoder: the target's tokens, the decoder start first")
    source_ids: list[int] | None = optional_field("an encoder-decoder: the source's token ids")
    target_ids: list[int] | None = optional_field("an encoder-decoder: the target's token ids")
    target: str | None = optional_field("an encoder-decoder: the target's text, as sent or as the model wrote it")
    target_generated: bool | None = optional_field("an encoder-decoder: whether the model wrote the target")


class ImplicitFields(BaseModel):
    """What an answer's layer adds when it is a value-linear mixer's (:mod:`model.families.mixers`)."""

    implicit: bool | None = optional_field(MEANINGS["implicit"])
    mixer: str | None = optional_field(MEANINGS["mixer"])
    per_channel: bool | None = optional_field(MEANINGS["per_channel"])
    skip: list[float] | None = optional_field(MEANINGS["skip"])


class HeadStats(BaseModel):
    """A softmax head's statistics; an implicit head (a value-linear mixer's) has only those that assume a
    distribution, computed on |M| normalised per row (entropy, max_weight, row_entropy), the rest null."""

    var_q: float | None
    var_k: float | None
    mean_scores_raw: float | None = Field(description="mean of q·kᵀ over unmasked entries")
    mean_scores: float | None = Field(description="mean of attn_scores (what softmax sees) over unmasked entries")
    var_scores_raw: float | None = Field(description="variance of q·kᵀ over unmasked entries")
    var_scores: float | None = Field(
        description="variance of attn_scores over unmasked entries: var_scores_raw / divisor², "
        "unless a softcap bends them"
    )
    variance_ratio: float | None = Field(
        description="var_scores_raw / var_scores: the divisor squared without a softcap (d_k when scale is sqrt_dk); "
        "null where var_scores is 0 (a one-token text: 0 / 0 has no value)"
    )
    entropy: float | None = Field(
        description="mean row entropy of pattern, nats (implicit head: of p = |M| / Σ_s |M| per row)"
    )
    entropy_unscaled: float | None = optional_field("mean row entropy of pattern_unscaled (if stats_unscaled)")
    max_weight: float | None = Field(description="mean of the row maxima of pattern (implicit head: of that p)")
    max_weight_unscaled: float | None = optional_field("mean of the row maxima of pattern_unscaled")
    row_entropy: list[float] | TypedArray | None = optional_field("per query row (absent with stats_rows false)")
    row_entropy_unscaled: list[float] | TypedArray | None = optional_field("per query row")
