"""Request and response models of ``POST /api/attention``, with examples.

Numbers on the wire: ``pattern`` and ``pattern_unscaled`` are rounded to 5 decimals (rows
still sum to 1 within 1e-3), scores and q/k/v to 4 decimals, statistics to 6 significant
digits, prediction probabilities floored to 6 significant digits (so each top-k list sums
to at most 1). Masked scores are ``null``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ...model.fields import FIELD_NAMES, HEAD_FIELDS
from .common import (
    TEMPERATURE_MAX,
    TEMPERATURE_MIN,
    HeadRef,
    HeadStats,
    ImplicitFields,
    Index,
    Matrix,
    Prediction,
    Strict,
    SubjectAnswer,
    TypedArray,
    optional_field,
)
from .model import ModelInfo
from .subject import ImagePart, Subject, WhatIfs

FIELDS = FIELD_NAMES
IncludeName = Literal[FIELD_NAMES]
DEFAULT_INCLUDE = ["pattern", "stats"]
TOP_K_MAX = 50
MAX_INDICES = 64  # longest `layers` / `heads` list
MAX_MATRIX_CELLS = 1 << 27  # cells of whole T×T matrices in one answer (512 MiB as float32)
MAX_IMAGE_BYTES, MAX_AUDIO_BYTES = 16 << 20, 32 << 20  # an image's, a recording's encoded bytes (more: 413)
MAX_IMAGE_PIXELS = 40_000_000  # an image's width × height, read from its header before decoding (more: 422)


# ------------------------------------------------------------------ requests


THUMBNAIL_MIN, THUMBNAIL_MAX = 4, 256
FOCUS_THUMBNAIL_MAX = 2048
REGION_MAX = 512  # cells per side of a focus region


class Focus(Strict):
    """One head sent at full resolution beside the selection (the head view beside the grid)."""

    layer: Index
    head: Index
    include: list[IncludeName] = Field(
        default_factory=lambda: ["pattern"], max_length=len(FIELDS) * 2, description="fields of the focus head"
    )
    thumbnail: int | None = Field(
        None,
        ge=4,
        le=FOCUS_THUMBNAIL_MAX,
        description="N: the focus head's matrices max-pooled on the server to at most N×N (blocks of ceil(T / N) "
        "tokens; fully masked score blocks null) instead of T×T: the answer's size no longer grows with T",
    )
    region: list[Annotated[int, Field(ge=0)]] | None = Field(
        None,
        min_length=4,
        max_length=4,
        description=f"[q0, q1, k0, k1], half-open: the exact cells of that block of the focus head's matrices "
        f"(at most {REGION_MAX}×{REGION_MAX}), as `focus.region`",
    )


class AttentionRequest(Subject, ImagePart, WhatIfs):
    """POST /api/attention. The text's length limit follows the server's settings."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "The cat sat on the mat. The cat", "include": ["pattern", "stats"]},
                {
                    "text": "The cat sat on the mat. The cat",
                    "include": ["stats"],
                    "thumbnail": 64,
                    "focus": {"layer": 1, "head": 2, "include": ["pattern", "attn_scores_raw"]},
                    "encoding": "b64",
                    "top_k": 5,
                },
                {
                    "text": "The cat sat on the mat.",
                    "layers": [1],
                    "heads": [2],
                    "include": list(FIELDS),
                    "causal": True,
                    "scale": "model",
                    "top_k": 5,
                    "temperature": 1.0,
                },
            ]
        },
    )

    layers: list[Index] | None = Field(
        None,
        max_length=MAX_INDICES,
        description="layers to return (0-based, ascending, duplicates ignored); every softmax layer if absent; "
        "a value-linear mixer's layer only when named here (`implicit`)",
    )
    heads: list[Index] | None = Field(
        None, max_length=MAX_INDICES, description="heads to return in each layer (0-based); all if absent"
    )
    mixers: list[Index] | None = Field(
        None,
        max_length=MAX_INDICES,
        description="layers whose value-linear mixer to send as an implicit entry (`implicit`) of the same number: "
        "a mixer beside softmax attention (Falcon-H1's Mamba-2, GET /api/model `layers[i].mixer`), or an implicit "
        "layer (as naming it in `layers`); its pattern or thumbnail as for `layers`",
    )
    include: list[IncludeName] = Field(
        default_factory=lambda: list(DEFAULT_INCLUDE),
        max_length=len(FIELDS) * 2,
        description="per-head fields to return",
    )
    thumbnail: int | None = Field(
        None,
        ge=THUMBNAIL_MIN,
        le=THUMBNAIL_MAX,
        description="each selected head also gets `thumbnail`: its pattern max-pooled on the server over "
        "blocks of ceil(T / N) tokens to at most N×N cells, as levels 0..255 (weight × 255, rounded)",
    )
    focus: Focus | None = Field(None, description="one head in full: the response's `focus` object")
    stats_rows: bool = Field(
        True, description="false: `stats` without the per-row arrays row_entropy* (the all-heads grid draws none)"
    )
    stats_unscaled: bool = Field(True, description="false: `stats` without the unscaled softmax's (the grid's)")
    encoding: Literal["json", "b64"] = Field(
        "json",
        description="json: numbers; b64: every matrix a typed array {dtype, bdata (base64), shape} as Plotly.js reads",
    )
    precision: Literal["f4", "f2"] = Field("f4", description="float type of the b64 matrices (f2: half the bytes)")
    top_k: int = Field(5, ge=0, le=TOP_K_MAX, description="predictions per position (decoder: next token)")
    temperature: float = Field(
        1.0, ge=TEMPERATURE_MIN, le=TEMPERATURE_MAX, allow_inf_nan=False, description="for the predictions"
    )
    spectrogram: bool = Field(
        False, description="with audio: the answer's `audio` adds the pooled log-mel spectrogram and the waveform"
    )
    alignment_mean: bool = Field(False, description="with audio: the answer adds the alignment heads' mean pattern")
    query_row: int | None = Field(
        None,
        ge=0,
        description="a query position: the answer's `query_row` holds its row of every head's pattern in every "
        "attention layer, each layer's mean over its heads and the mean over all of them",
    )


# ------------------------------------------------------------------ responses


MaskedMatrix = list[list[float | None]] | TypedArray
Levels = list[list[int]] | TypedArray


FIELD_TYPE = {
    "weights": Matrix,
    "scores": MaskedMatrix,
    "vectors": Matrix,
    "rows": list[float] | TypedArray,
    "parts": list[Matrix],
    "stats": HeadStats,
}

# What one head computed: a field per row of the field table (model/fields.py), its kind's type.
HeadFields = create_model(
    "HeadFields",
    __doc__="What one head computed, each field present only when asked for (typed arrays in b64).",
    **{f.name: (FIELD_TYPE[f.kind] | None, optional_field(f.meaning)) for f in HEAD_FIELDS},
)


class HeadView(HeadFields):
    head: int
    thumbnail: Levels | Matrix | None = optional_field(
        "the pattern max-pooled to at most N×N (request `thumbnail`), levels 0..255 = weight × 255; with "
        "differential attention |pattern| (its cells can be negative); in an implicit layer M pooled keeping its "
        "sign, numbers: each cell the value of largest |M| in its block"
    )


class LayerView(ImplicitFields):
    layer: int
    divisor: float | None = optional_field("what this layer divided q·kᵀ by (absent in an implicit layer)")
    divisor_rule: str | None = Field(
        None, description="how that divisor came about: 'sqrt(head_dim)', 'sqrt(query_pre_attn_scalar)', "
        "'sqrt(head_dim) * (layer + 1)', '1' (scale 'none'), 'scale' (the number asked) or "
        "'<value> (set by the model)'"
    )
    softcap: float | None = Field(
        None,
        description="attention logit softcap: attn_scores = softcap·tanh(q·kᵀ / divisor / softcap); null if none"
    )
    window: int | None = Field(
        None, description="the sliding window this layer's mask applied: a query sees itself and the window − 1 tokens "
        "before it; null if none (full causal, or causal false)"
    )
    chunk: int | None = optional_field(
        "chunked attention (Llama 4): the chunk in tokens; a query sees only the earlier tokens of its own chunk "
        "(positions chunk·n to chunk·(n + 1) − 1); absent elsewhere or with causal false"
    )
    sink_logit: list[float] | None = optional_field(
        "each head's learned attention-sink logit (gpt-oss): one more column of every row's softmax, then "
        "dropped, so the pattern's rows sum to 1 − sink_mass; absent where the layer has no sinks"
    )
    lambda_: float | None = optional_field(
        "differential attention (DiffLlama): the layer's learned λ, "
        "pattern = pattern_parts[0] − λ · pattern_parts[1]; "
        "absent elsewhere",
        alias="lambda",
    )
    mask: Levels | None = optional_field(
        "this layer's mask (1 = may attend), only where it differs from the top-level one (a sliding window)"
    )
    thumbnail_mask: Levels | None = optional_field("this layer's thumbnail mask, where it differs")
    heads: list[HeadView]


class FocusRegion(HeadFields):
    """Exact cells of one block of the focus head's matrices (request `focus.region`)."""

    bounds: list[int] = Field(description="[q0, q1, k0, k1], half-open: rows q0..q1-1, columns k0..k1-1")


class FocusThumbnailInfo(BaseModel):
    size: int = Field(description="the focus matrices are size×size")
    block: int = Field(description="tokens per cell along each axis, as in `thumbnail`; 1 = not downsampled")
    mask: Levels = Field(description="size×size, 1 where any cell of the block may attend")


class FocusView(HeadFields):
    """The focus head: at full resolution, or with `thumbnail` max-pooled (the matrices are then
    size×size: weights the block maximum, scores the maximum over the block's unmasked cells); its
    `stats` carry the per-row arrays; `region` the exact cells of one block when asked."""

    layer: int
    head: int
    thumbnail: FocusThumbnailInfo | None = optional_field("present when the matrices are max-pooled")
    region: FocusRegion | None = optional_field("the exact cells of `focus.region`")


class ThumbnailInfo(BaseModel):
    size: int = Field(description="thumbnails are size×size")
    block: int = Field(
        description="tokens per thumbnail cell along each axis: cell (i, j) is the maximum over queries "
        "i·block .. and keys j·block .. (the last cell of a row may cover fewer); 1 = not downsampled"
    )
    mask: Levels = Field(description="size×size, 1 where any cell of the block may attend")


class QueryRowLayer(BaseModel):
    layer: int
    heads: list[list[float]] = Field(description="[head][key]: the query's row of each head's pattern")
    mean: list[float] = Field(description="[key]: the mean of the layer's heads' rows")


class QueryRow(BaseModel):
    query: int = Field(description="the query position asked for")
    layers: list[QueryRowLayer] = Field(description="every attention layer, in order")
    mean: list[float] = Field(description="[key]: the mean over every head of every attention layer")


class AttentionResponse(SubjectAnswer):
    tokens: list[str] = Field(description="display strings; a leading space shows as ␣")
    token_ids: list[int]
    offsets: list[list[int]] = Field(
        description="[start, end] character span of each token in text (with an image, tokens the chat template or "
        "the image added: an empty span before or after the text)"
    )
    span_mass: list[list[list[float]] | None] | None = optional_field(
        "with `messages`: [layer][head][span], the weight the last query row puts on each message's content tokens "
        "(null for a layer without softmax attention)"
    )
    query_row: QueryRow | None = optional_field("when `query_row` was asked for")
    stack: str = Field(description="the attention stack the layers are of: `decoder`, or an encoder's `encoder`")
    causal: bool = Field(description="the request's `causal` on a decoder; false on an encoder (its mask is its own)")
    scale: str | float = Field(description="the request's scale option")
    divisor: float = Field(description="the number raw scores were divided by (the first returned layer's)")
    encoding: Literal["json", "b64"]
    ablate: list[HeadRef] = Field(description="the request's switched-off heads, as sent")
    mask: Levels | None = optional_field(
        "T×T, 1 where the query may attend to the key (absent if no layer, and in an answer of thumbnails without "
        "T×T matrices: then `thumbnail.mask`)"
    )
    thumbnail: ThumbnailInfo | None = optional_field("present when thumbnails were asked for and a head selected")
    layers: list[LayerView]
    focus: FocusView | None = optional_field("the focus head, when asked for")
    predictions: list[list[Prediction]] = Field(
        description="per position its top_k: on a decoder the next token "
        "after it, on an encoder the masked-LM head's guesses at it"
    )
    model: ModelInfo
    timing_ms: float = Field(description="server time for this request (always the last field)")
