"""Response models of ``GET /api/model`` and ``GET /api/heads``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ...model.fields import Kind
from .common import Strict, optional_field
from .subject import SubjectPart


class Limits(BaseModel):
    max_text_chars: int = Field(description="longest `text`, in characters (a guard; the limit is `block_size` tokens)")
    max_matrix_cells: int = Field(
        description="most cells of whole T×T matrices one answer may hold: (layers × heads × matrices in `include` "
        "(attn_scores_uncapped only on a model with a softcap), plus the focus head's unless pooled or a region) "
        "× T²; "
        "larger requests get a 422 naming it"
    )
    region_max: int = Field(description="most query rows and key columns of one `focus.region`")
    max_new_tokens: int = Field(description="most tokens one `POST /api/generate` adds")


class ImageLimits(BaseModel):
    max_bytes: int = Field(description="largest image, in encoded bytes (more: 413)")
    max_pixels: int = Field(description="most pixels (width × height, read from the header before decoding; more: 422)")


class AudioLimits(BaseModel):
    max_bytes: int = Field(description="largest recording, in encoded bytes (more: 413)")
    max_seconds: float = Field(description="the model's window: a longer recording is a 422 naming `audio`")


class FieldInfo(BaseModel):
    """One row of the field table (model/fields.py): what an answer can hold, and how a quirk is drawn."""

    name: str
    kind: Kind = Field(
        description="weights: T×T softmax, masked 0; scores: T×T, masked null; vectors: T×head_dim; "
        "rows: one number per query; parts: two T×T softmax matrices (differential attention); stats; "
        "number: one number a layer; heads: one number a head of the layer; kinds: one word a token; "
        "spans: [{message, role, start, end}], half-open token ranges; shares: [layer][head][span], a share "
        "a message; word: one word a layer (an implicit layer's mixer)"
    )
    decimals: int | None = Field(description="decimals kept in JSON; null for the statistics (significant digits)")
    meaning: str
    at: Literal["head", "layer", "answer"] = Field(
        description="where an answer holds it: a head's fields (an `include` name), its layer's, the answer's own"
    )
    feature: str = Field(
        description="which layers or answers have it: all, or only those with one feature (softcap, sinks, mla, "
        "gates, differential, image, chat)"
    )
    score_part: bool = Field(description="one of the parts attn_scores_raw splits into (they add up to it)")
    sits: Literal["row", "head", "parts", "band"] | None = optional_field(
        "a quirk: where the page draws it: row, a strip beside the query axis; head, a number beside the head; "
        "parts, panels beside the pattern (and the cell's hover); band, a band on the token axes"
    )
    label: str | None = optional_field("a quirk: its words in a legend, a strip's head, a panel's title")
    scale: Literal["weights", "share", "signed", "scores", "band"] | None = optional_field(
        "a quirk's colours: weights 0..1; share 0..1 in the weights' colours; signed and scores the diverging "
        "scale, red = positive; band a colour per value of `values`"
    )
    words: dict[str, str] | None = optional_field(
        "a quirk's sentences by where they stand (rows, pooled, sums, steps, stats, grid, lines, hover, scores, "
        "colorbar, cell, heads, keys, band, head); {name} is the layer's number of the field name, {value}, {min}, "
        "{max} this field's, {0} and {1} its parts', {n}, {role}, {message} a band's"
    )
    parts: list[str] | None = optional_field("a quirk of kind parts: each part's panel title")
    signed: bool | None = optional_field("where a layer has this quirk, its pattern is signed (first − λ·second)")
    flag: str | None = optional_field("the /api/model key that is true when this model has the quirk")
    values: list[str] | None = optional_field("a band's values, in the order of their colours")


class LayerInfo(BaseModel):
    """One of the model's layers, numbered as the model numbers them."""

    index: int
    type: Literal[
        "full", "sliding", "chunked", "nope", "linear", "conv", "ssm", "gated_deltanet", "kimi_delta", "mamba2",
        "lightning", "mamba1", "short_conv",
    ] = Field(
        description="full: softmax attention over every earlier token; sliding: over a window (`window`); "
        "chunked: inside the query's chunk (`chunk`); nope: full, without rotary positions; "
        "gated_deltanet, kimi_delta, mamba2, lightning, mamba1, short_conv: a mixer linear in its values, drawn "
        "as implicit attention (`implicit`); linear, conv, ssm: no softmax attention and no mixer attnscope can "
        "draw: no heads"
    )
    implicit: bool | None = optional_field(
        "true where the layer's mixer is linear in its values: POST /api/attention sends its M when `layers` names it"
    )
    heads: int | None = optional_field(
        "implicit layers: the heads of M (1 for mamba1, short_conv: the mean |M| over channels)"
    )
    mixer: str | None = optional_field(
        "a softmax layer that also runs a value-linear mixer beside its attention (Falcon-H1: mamba2): the mixer, "
        "sent as an implicit entry of the same layer number when POST /api/attention names it in `mixers`"
    )
    mixer_heads: int | None = optional_field("that mixer's heads of M")
    window: int | None = optional_field("sliding: the window in tokens (the query and the window − 1 before it)")
    chunk: int | None = optional_field("chunked: the chunk in tokens; a query sees the earlier tokens of its own chunk")
    note: str | None = optional_field("what else the layer does that the drawing does not show")


class JLensInfo(BaseModel):
    source_layers: list[int] = Field(description="the blocks the Jacobian lens reads (each has its J)")
    n_prompts: int = Field(description="the prompts it was fitted over")


class StackInfo(BaseModel):
    name: Literal["encoder", "decoder", "cross"] = Field(description="the request's `stack` that picks it")
    n_layer: int
    n_head: int
    query: Literal["source", "target"] = Field(description="whose tokens the queries are")
    key: Literal["source", "target"] = Field(description="whose tokens the keys are")
    merged_softmax: bool = Field(
        False,
        description="true where this stack's rows are one part of a softmax the decoder and cross stacks share "
        "(T5Gemma 2): a row's part here and its part in the other stack add up to 1 together, not each",
    )


class ModelInfo(BaseModel):
    name: str
    architecture: Literal["decoder", "encoder", "encoder-decoder"] = Field(
        description="decoder: a causal LM (next-token predictions); encoder: a masked LM (BERT and its kin: every "
        "row sees every key, predictions are guesses at each position)"
    )
    stacks: list[StackInfo] = Field(description="the attention stacks the model has; a request's `stack` names one")
    family: str = Field(description="'attnscope' (ours) or the transformers model_type: gpt2, gpt_neox, llama, ...")
    n_layer: int = Field(description="every layer of the model, with softmax attention or not")
    attention_layers: list[int] = Field(
        description="the numbers of the layers with softmax attention: "
        "the layers an answer can hold (all but a hybrid's)"
    )
    layers: list[LayerInfo] = Field(description="what each layer is, by its number")
    n_head: int = Field(description="query heads per layer")
    n_kv_head: int = Field(description="key/value heads per layer (fewer than n_head with grouped-query attention)")
    kv_head_of: list[int] = Field(description="for each query head, the key/value head it reads")
    head_dim: int = Field(description="of q and k: the dimension of q·kᵀ (d_k)")
    qk_head_dim: int = Field(description="head_dim, by the name MLA models give it (no-RoPE part + RoPE part)")
    v_head_dim: int = Field(description="of v: head_dim, except in multi-head latent attention (DeepSeek)")
    output_gates: bool = Field(
        description="true where a sigmoid gate scales each head's output before o_proj (Qwen3-Next): "
        "`gate` comes with `pattern`"
    )
    differential: bool = Field(
        description="true for differential attention (DiffLlama): a head is a pair of softmaxes, `pattern` their "
        "signed difference, `pattern_parts` the two, `lambdas` each layer's λ"
    )
    lambdas: list[float | None] = Field(description="per layer: differential attention's λ; empty for other models")
    score_parts: bool = Field(
        description="true where q·kᵀ comes in parts that can be asked for: multi-head latent attention's "
        "attn_scores_content + attn_scores_position, DeBERTa's attn_scores_content + attn_scores_content_position "
        "+ attn_scores_position_content (each = attn_scores_raw)"
    )
    vision: bool = Field(False, description="an image-text model: `image` may come with a text")
    chat: bool = Field(False, description="the model carries a chat template: `messages` may replace `text`")
    subject: list[SubjectPart] = Field(
        description='the parts of a request\'s subject this model takes, e.g. ["text", "messages", "image"]; '
        'a speech model\'s ["audio", "target"]'
    )
    image_limits: ImageLimits | None = Field(None, description="the image limits, on an image-text model; else null")
    audio: bool = Field(False, description="a speech-to-text model: `audio` is its source (Whisper)")
    audio_limits: AudioLimits | None = Field(None, description="a speech model's recording limits; else null")
    alignment_heads: list[list[int]] | None = Field(
        None,
        description="a speech model's [layer, head] of the cross stack that time the words "
        "(generation_config.alignment_heads); null where the checkpoint names none",
    )
    jlens: JLensInfo | None = Field(
        None, description="the Jacobian lens loaded with --jlens (POST /api/lens with lens: jacobian); else null"
    )
    d_model: int
    divisor: float = Field(description="what the model divides q·kᵀ by (not always √head_dim)")
    divisor_rule: str = Field(description="how the model defines its divisor")
    softcap: float | None = Field(description="attention logit softcapping, null if none")
    sliding_window: list[int | None] = Field(description="per layer: the sliding window in tokens, null if none")
    block_size: int = Field(description="context length in tokens")
    vocab_size: int
    positions: str = Field(description="learned, rotary, ...")
    bos_token: str | None = Field(description="the token put in front of every text, as in training")
    dtype: str
    device: str = Field(description="where inputs go: the model's device (with a device map: its first GPU, else cpu)")
    devices: dict[str, str] = Field(
        default_factory=dict,
        description='per layer, by its number: where its weights sit, "cpu", "cuda:0", ... or "disk" (--device-map)',
    )
    parameters: int
    source_format: str = Field(
        "safetensors", description="what the weights were read from: safetensors, pytorch (.bin) or gguf"
    )
    quantization: str | None = Field(
        None, description="a GGUF file's type as llama.cpp names it (Q4_K_M, Q8_0, F16, ...); null for other formats"
    )
    checkpoint: str
    training: dict[str, Any] = Field(description="what training measured (training.json), {} if unknown")
    limits: Limits = Field(description="what this server accepts in one request")
    fields: list[FieldInfo] = Field(
        description="what an answer can hold: a head's fields (`include` names, `at` head), with their kind and "
        "rounding, then the layer's and the answer's quirks; each quirk with how it is drawn"
    )
    layer_kinds: dict[str, str] = Field(
        default_factory=dict, description="what each `type` of layer (and a `mixer` beside attention) is, in words"
    )


class LocalModel(BaseModel):
    name: str = Field(description="as `--model`, `--ollama` or the file names it")
    source: Literal["hub-cache", "ollama", "lm-studio", "models-dir", "dir"]
    path: str | None = Field(
        description="its folder or file, relative to where it was found (the Hub cache, Ollama's or LM Studio's "
        "folder, --models-dir; the model the server started with: its own name), never an absolute path"
    )
    size_bytes: int | None
    status: str = Field(description="'ok', or why it cannot be opened")
    open_with: str = Field(description="the command that serves it")
    served: bool = Field(description="the model answering now (`serving`): a second model to compare is another")


class SwitchState(BaseModel):
    name: str
    status: Literal["loading", "failed"]
    error: str | None = Field(description="why the model could not be loaded (status failed)")


class ModelsResponse(BaseModel):
    models: list[LocalModel] = Field(
        description="the model the server started with first, then the Hub cache, Ollama, LM Studio"
    )
    serving: str | None = Field(description="the name of the model answering now")
    switch: SwitchState | None = Field(
        description="a model loading in its place (POST /api/model), or the last failure"
    )


class SwitchRequest(Strict):
    name: str = Field(min_length=1, max_length=512, description="a `name` of GET /api/models")


class SwitchStatus(BaseModel):
    name: str
    status: Literal["loading", "serving"] = Field(description="loading: poll GET /api/models; serving: already served")
    cancelled: str | None = optional_field(
        "with serving (absent with loading): the model whose pending switch this request cancelled, null if none"
    )


class HeadsResponse(BaseModel):
    roles: list[str]
    scores: list[list[list[float]] | None] = Field(
        description="[layer][head][role], each in [0, 1]; null for a layer without softmax attention"
    )
