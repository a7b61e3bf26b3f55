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

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...model.families.mixers import MEANINGS
from .audio import AlignmentMean, AudioShown, TokenTimestamps, Words

TEXT_CHARS = 16000  # the longest text when the server's settings do not say otherwise
TEMPERATURE_MIN, TEMPERATURE_MAX = 1e-2, 1e2

Index = Annotated[int, Field(ge=0)]


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def optional_field(description: str, **kwargs: Any) -> Any:
    """A response field present only when asked for (absent, never null)."""
    return Field(None, description=description, json_schema_extra=_no_default, **kwargs)


class Strict(BaseModel):
    """A request model: strict types, unknown fields refused."""

    model_config = ConfigDict(strict=True, extra="forbid")



class HeadRef(Strict):
    """One head: ``{"layer", "head"}``, 0-based."""

    layer: Index
    head: Index


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
