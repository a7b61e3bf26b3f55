"""The subject of a request: what it looks at, read the same way by every route.

A request schema composes the parts its route takes, and only those: :class:`Subject` (``text`` or
``messages``, ``add_generation_prompt``, ``stack``, ``target``, a speech model's ``audio``),
:class:`ImagePart` (``image``), :class:`WhatIfs` (``causal``, ``scale`` and ``ablate``) or :class:`Ablate`
(``ablate`` alone). A part a schema does not compose is refused as an unknown field (a 422 naming it), so
which route takes which part is said here and in each schema's bases, once; :mod:`attnscope.app.subject`
resolves the parts into what the model reads. :func:`with_text_limit` gives a schema the server's longest text.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, ValidationInfo, WithJsonSchema, create_model, field_validator
from pydantic.functional_validators import PlainValidator
from pydantic_core import PydanticCustomError

from .audio import AudioUpload
from .common import TEXT_CHARS, HeadRef, Index, Strict

MAX_ABLATE = 1024  # longest `ablate` list
MAX_EDGES = 1024  # longest `edges` list
MAX_MESSAGES = 256  # most turns in a conversation
SCALE_MIN, SCALE_MAX = 1e-3, 1e4  # wider would overflow float32 scores or their variances


class SubjectPart(str, Enum):
    """A part of a request's subject, by the name a request schema gives it (the OpenAPI document's ``SubjectPart``:
    the page reads which route takes which part from it and each route's request schema)."""

    text = "text"
    messages = "messages"
    add_generation_prompt = "add_generation_prompt"
    audio = "audio"
    image = "image"
    stack = "stack"
    target = "target"
    causal = "causal"
    scale = "scale"
    ablate = "ablate"
    edges = "edges"


# every part a subject may have (contract v6: one subject on every route), as the schemas below name them
PARTS = tuple(part.value for part in SubjectPart)


def text_field(max_chars: int = TEXT_CHARS, required: bool = True) -> Any:
    return Field(
        ... if required else None,
        validate_default=not required,  # an optional text: its check runs when it is left out too
        min_length=1,
        max_length=max_chars,
        description=f"the input, 1..{max_chars} characters" + ("" if required else "; or `messages` instead"),
    )



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


def target_field(description: str) -> Any:
    """An encoder-decoder's ``target``: the decoder's text, within the text limit, as ``description`` says."""
    return Field(None, min_length=1, max_length=TEXT_CHARS, description=description)


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
    target: str | None = target_field(
        "an encoder-decoder's target: the decoder's text, teacher-forced after the model's decoder "
        "start; left out, the model writes one greedily (at most 32 tokens, as `generate()`) and the answer says "
        "`target_generated`. A 422 naming `target` on a model without a decoder over a source"
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


def _check_scale(value: Any) -> str | float:
    if isinstance(value, str) and value in ("model", "sqrt_dk", "none"):
        return value
    # compared as given: float(10**400) would raise OverflowError (a 500) before any range check
    if isinstance(value, (int, float)) and not isinstance(value, bool) and SCALE_MIN <= value <= SCALE_MAX:
        return float(value)
    raise PydanticCustomError(
        "scale_invalid",
        "scale must be 'model', 'sqrt_dk', 'none' or a number from 0.001 to 10000",
        {"min": SCALE_MIN, "max": SCALE_MAX},
    )


Scale = Annotated[
    str | float,
    PlainValidator(_check_scale),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "enum": ["model", "sqrt_dk", "none"]},
                {"type": "number", "minimum": SCALE_MIN, "maximum": SCALE_MAX},
            ],
            "description": "what the raw scores are divided by: 'model' (the model's own divisor, as trained), "
            "'sqrt_dk' (√head_dim), 'none' (1) or a number",
        }
    ),
]

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


class ImagePart(Strict):
    """The subject's image: a request that composes this takes one (an image-text model's)."""

    image: ImageUpload = None


class Ablate(Strict):
    """The what-if every route that runs the model takes: heads switched off."""

    ablate: list[HeadRef] = ablate_field()


Span = Index | Annotated[list[Index], Field(min_length=2, max_length=2)]


class KnockoutEdge(Strict):
    """Queries and keys of one layer (one head, or every head) whose scores become -inf."""

    layer: Index
    query: Span = Field(description="a position, or a half-open range [a, b] of positions")
    key: Span = Field(description="a position, or a half-open range [a, b] of positions")
    head: Index | None = Field(None, description="absent: every head of the layer")


def edges_field(required: bool = False) -> Any:
    return Field(
        ... if required else [],
        min_length=1 if required else 0,
        max_length=MAX_EDGES,
        description="edges knocked out: each one's scores are -inf before that layer's softmax, so its row "
        "renormalises over the keys it keeps; the patterns and predictions after follow",
    )


class Edges(Strict):
    """The what-if of knocked-out edges (attention knockout), checked against the subject's tokens."""

    edges: list[KnockoutEdge] = edges_field()


class WhatIfs(Ablate, Edges):
    """The what-ifs of a route that reads the patterns: the mask removed, another divisor, heads switched off,
    edges knocked out."""

    causal: bool = Field(True, description="false: a what-if with a decoder's mask removed in every layer")
    scale: Scale = "model"


def parts_of(model: type) -> list[str]:
    """The parts of the subject a request schema takes (in :data:`PARTS`'s order): what its route reads, the
    one place that says so; any other part is refused as an unknown field."""
    fields = getattr(model, "model_fields", {})
    return [part for part in PARTS if part in fields]
