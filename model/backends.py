"""What every model family offers the rest of attnscope: facts, a tokenizer, and ``run``.

``run(ids, opts, sink, logits)`` is one forward pass through the explicit attention path:
each layer appends an :class:`~model.trace.AttentionTrace` to ``sink`` (a list, or a sink of
:mod:`model.capture` that keeps only what a view asks for) and the logits come back if asked.
The service, the CLI, head roles and the page are written once against this interface, declared
as the :class:`Backend` protocol (and :class:`ResumableBackend`, ours, which can also start a pass
at any block). :class:`ModelFacts` says what the model is, each layer's divisor included.

Two families implement it:

* :class:`OursBackend`: our own :class:`~model.ours.gpt.GPT` (the shipped model, and GPT-2
  directories converted into it), the readable reference;
* :class:`model.families.backend.TransformersBackend`: any local transformers causal LM, recorded
  through transformers' ``AttentionInterface``.

:func:`model.registry.load_model` picks one from ``config.json``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from .options import AttentionOptions
from .ours.gpt import GPT, KVCache
from .ours.tokenizer import BPETokenizer
from .precision import exact_fp32
from .trace import AttentionTrace

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class ModelFacts:
    """What the API's ``model`` object and the page's model panel show, and each layer's divisor.

    Layers are numbered as the model numbers them, ``0 .. n_layer - 1``; in a hybrid only some of
    them are softmax attention (``attention_layers``), and ``layers`` says what each one is
    (:data:`LAYER_TYPES`). Per-layer lists are indexed by that number, ``None`` where a layer
    has no softmax attention.

    The divisor is decided here, once, by the backend that knows it: ``layer_divisors[l]`` is
    what layer ``l`` divides q·kᵀ by, and ``layer_divisor_rules[l]`` how the model defines it,
    an expression in the config's names (``"sqrt(head_dim)"``, ``"sqrt(query_pre_attn_scalar)"``,
    ``"sqrt(head_dim) * (layer + 1)"``) or ``"<value> (set by the model)"``. ``divisor`` and
    ``divisor_rule`` follow from them: the first layer's, the rule prefixed ``"per layer: "``
    when the layers' divisors differ.
    """

    name: str
    family: str  # "attnscope" (ours), or transformers' model_type: "gpt2", "gpt_neox", "llama", ...
    n_layer: int  # every layer of the model, softmax attention or not
    n_head: int  # query heads per layer
    n_kv_head: int  # key/value heads per layer (fewer with grouped-query attention)
    head_dim: int  # of q and k (the q·kᵀ dimension, d_k)
    d_model: int
    layer_divisors: list[float | None]  # per layer: what q·kᵀ is divided by in the trained model
    layer_divisor_rules: list[str | None]  # per layer: how the model defines that divisor
    divisor: float = field(init=False)  # the first layer's divisor
    divisor_rule: str = field(init=False)  # the first layer's rule, "per layer: " before it if the layers differ
    block_size: int  # context in tokens
    vocab_size: int
    positions: str  # "learned", "rotary", ...
    parameters: int
    dtype: str
    device: str
    softcap: float | None = None  # attention logit softcapping (Gemma 2)
    sliding_window: list[int | None] = field(default_factory=list)  # per layer; None = full causal
    bos_token: str | None = None  # prefixed to every text, as in training
    source_format: str = "safetensors"  # what the weights were read from: safetensors, pytorch (.bin) or gguf
    quantization: str | None = None  # a GGUF file's type (Q4_K_M, Q8_0, F16, ...); None for other formats
    v_head_dim: int = 0  # of v, where it differs from q and k (MLA); 0: head_dim
    score_parts: bool = False  # q·kᵀ is sent in parts too: MLA's two, DeBERTa's three (model.fields SCORE_PARTS)
    vision: bool = False  # an image-text model: a request may carry one image (model.vision)
    chat: bool = False  # the model carries a chat template: a request may be a conversation (model.chat)
    output_gates: bool = False  # a sigmoid gate scales each head's output before o_proj (Qwen3-Next): sent as `gate`
    # differential attention (DiffLlama): per layer its λ, a head being a pair of softmaxes,
    # pattern = first − λ·second; empty for every other model
    lambdas: list[float | None] = field(default_factory=list)
    differential: bool = field(init=False)
    qk_head_dim: int = field(init=False)  # head_dim, under the name MLA models give it
    attention_layers: list[int] = field(default_factory=list)  # the softmax layers' numbers; empty: every layer
    # per layer {"index", "type", ...}; empty: every one "full"
    layers: list[dict[str, Any]] = field(default_factory=list)
    # per layer (its number as a string) where its weights sit: "cpu", "cuda:0", "disk" (a device map); empty: `device`
    devices: dict[str, str] = field(default_factory=dict)
    architecture: str = "decoder"  # "decoder" (causal LM) or "encoder" (masked LM, every row sees every key)
    stacks: list[dict[str, Any]] = field(init=False)  # the attention stacks: one, named as the architecture

    def __post_init__(self) -> None:
        self.qk_head_dim = self.head_dim
        self.differential = bool(self.lambdas)
        self.v_head_dim = self.v_head_dim or self.head_dim
        self.attention_layers = self.attention_layers or list(range(self.n_layer))
        self.layers = self.layers or [{"index": i, "type": _type_of(w)} | _size(w) for i, w in self._windows()]
        self.devices = self.devices or {str(i): self.device for i in range(self.n_layer)}
        side = "source" if self.architecture == "encoder" else "target"  # what its queries and keys are
        self.stacks = [dict(name=self.architecture, n_layer=self.n_layer, n_head=self.n_head, query=side, key=side)]
        first = self.attention_layers[0]
        self.divisor = self.layer_divisors[first]
        differ = len({round(self.layer_divisors[i], 6) for i in self.attention_layers}) > 1
        self.divisor_rule = ("per layer: " if differ else "") + self.layer_divisor_rules[first]

    def _windows(self):
        return enumerate(self.sliding_window or [None] * self.n_layer)

    def by_number(self, rows: list) -> list:
        """One item per attention layer -> one per layer of the model,
        ``None`` where a layer has no softmax attention."""
        at = dict(zip(self.attention_layers, rows))
        return [at.get(layer) for layer in range(self.n_layer)]

    @property
    def kv_head_of(self) -> list[int]:
        """For each query head (a differential pair: its first softmax's), the key/value head it reads."""
        group = self.n_head * (2 if self.differential else 1) // self.n_kv_head
        return [h // group for h in range(self.n_head)]

    def to_dict(self) -> dict[str, Any]:
        """The API's ``model`` object: every fact but the per-layer divisors (each layer of an
        answer carries its own ``divisor`` and ``divisor_rule``), and ``kv_head_of``."""
        facts = asdict(self)
        del facts["layer_divisors"], facts["layer_divisor_rules"]
        return {**facts, "kv_head_of": self.kv_head_of}


# what a layer is (ModelFacts.layers[l]["type"]): softmax attention over every earlier token, a
# sliding window, chunks, every earlier token without rotary positions; or no softmax attention at all
LAYER_TYPES = ("full", "sliding", "chunked", "nope", "linear", "conv", "ssm")


def _type_of(window: int | None) -> str:
    return "full" if window is None else "sliding"


def _size(window: int | None) -> dict[str, int]:
    return {} if window is None else {"window": window}


def parameter_count(module: torch.nn.Module) -> int:
    """Parameters, a tied embedding counted once."""
    return sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())


@runtime_checkable
class Backend(Protocol):
    """What the rest of attnscope uses of a model family, and nothing more: the service, the CLI,
    the notebook, inspection, head roles, ablation and generation are written against these
    members alone. :class:`OursBackend` and :class:`model.families.backend.TransformersBackend` have them."""

    facts: ModelFacts
    tokenizer: BPETokenizer
    chat_template: Any  # a model.chat.ChatTemplate where the model carries one (facts.chat), else None
    model: torch.nn.Module  # the model itself (its ``config``, ``generation_config``; ours: export)
    device: torch.device

    def run(self, ids: list[int], opts: AttentionOptions, sink, logits: bool = True) -> torch.Tensor | None:
        """Token ids -> each layer's :class:`AttentionTrace` into ``sink``; logits ``(T, V)`` or ``None``."""

    def hidden(self, ids: list[int], opts: AttentionOptions, sink) -> torch.Tensor:
        """Like :meth:`run`, but returns what the LM head reads, ``(T, C)``."""

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """What the LM head reads ``(n, C)`` -> logits ``(n, V)``."""

    def patterns(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids ``(B, T)`` -> the trained model's patterns ``(B, L, nh, T, T)`` on the CPU."""

    def last_logits(self, idx: torch.Tensor, opts: AttentionOptions) -> torch.Tensor:
        """Token ids ``(B, T)`` -> the logits after the last position ``(B, V)``, float32."""

    def start_generation(self) -> Any:
        """An empty key/value cache for :meth:`step`."""

    def step(self, ids: list[int], cache: Any, opts: AttentionOptions) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The tokens after those in ``cache`` -> logits after the last one ``(V,)`` and each
        layer's pattern row of that last token ``(nh, S)``."""


@runtime_checkable
class ResumableBackend(Backend, Protocol):
    """A backend that can start a forward pass at any block (ours): on a CPU, head effects and patching
    then run the layers before a row's block once for all its rows (:func:`model.ablation.resumes`)."""

    def block_inputs(self, idx: torch.Tensor, opts: AttentionOptions) -> list[torch.Tensor]:
        """Token ids ``(1, T)`` -> the residual stream entering each block, ``L × (1, T, C)``."""

    def last_logits_from(self, layer: int, x: torch.Tensor, opts: AttentionOptions) -> torch.Tensor:
        """The residual stream entering block ``layer`` ``(B, T, C)`` ->
        the logits after the last position ``(B, V)``."""


class OursBackend:
    """Our :class:`GPT`: the reference implementation, one named tensor per attention step."""

    family = "attnscope"

    def __init__(self, model: GPT, tokenizer: BPETokenizer, device: torch.device, dtype: torch.dtype = torch.float32):
        self.model = model.to(device=device, dtype=dtype).eval()
        self.tokenizer = tokenizer
        self.chat_template = None  # our model has no chat template
        self.device = device
        cfg = model.config
        self.facts = ModelFacts(
            name=cfg.name,
            family=self.family,
            n_layer=cfg.n_layer,
            n_head=cfg.n_head,
            n_kv_head=cfg.n_head,
            head_dim=cfg.head_dim,
            d_model=cfg.n_embd,
            layer_divisors=[math.sqrt(cfg.head_dim)] * cfg.n_layer,
            layer_divisor_rules=["sqrt(head_dim)"] * cfg.n_layer,
            block_size=cfg.block_size,
            vocab_size=cfg.vocab_size,
            positions="learned",
            parameters=parameter_count(model),
            dtype=str(dtype).removeprefix("torch."),
            device=str(device),
            sliding_window=[None] * cfg.n_layer,
        )

    @torch.inference_mode()
    @exact_fp32()
    def run(self, ids: list[int], opts: AttentionOptions, sink, logits: bool = True) -> torch.Tensor | None:
        """Token ids -> each layer's :class:`AttentionTrace` into ``sink``; logits ``(T, V)`` or ``None``."""
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        if not logits:
            self.model.hidden_states(idx, opts=opts, trace=sink)
            return None
        out, _ = self.model(idx, opts=opts, trace=sink)  # (1, T, V)
        return out[0]

    @torch.inference_mode()
    @exact_fp32()
    def hidden(self, ids: list[int], opts: AttentionOptions, sink) -> torch.Tensor:
        """Like :meth:`run`, but returns what the LM head reads, ``(T, C)``: predictions can
        then be taken a chunk of positions at a time (:func:`top_logits`)."""
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        return self.model.hidden_states(idx, opts=opts, trace=sink)[0]  # (T, C)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """(n, C) -> logits (n, V)."""
        return self.model.lm_head(h)

    @torch.inference_mode()
    @exact_fp32()
    def last_logits(self, idx: torch.Tensor, opts: AttentionOptions) -> torch.Tensor:
        """Token ids ``(B, T)`` -> the logits after the last position ``(B, V)``, float32: the fast
        attention path, a batch of what-ifs at once (head effects)."""
        h = self.model.hidden_states(idx.to(self.device), opts=opts)  # (B, T, C)
        return self.model.lm_head(h[:, -1]).float()

    @torch.inference_mode()
    @exact_fp32()
    def block_inputs(self, idx: torch.Tensor, opts: AttentionOptions) -> list[torch.Tensor]:
        """Token ids ``(1, T)`` -> the residual stream entering each block, ``L × (1, T, C)``: a what-if
        that starts at layer l shares everything before it (:meth:`last_logits_from`)."""
        x = self.model.embed(idx.to(self.device))  # (1, T, C)
        inputs = []
        for block in self.model.transformer.h:
            inputs.append(x)
            x = block(x, opts)
        return inputs

    @torch.inference_mode()
    @exact_fp32()
    def last_logits_from(self, layer: int, x: torch.Tensor, opts: AttentionOptions) -> torch.Tensor:
        """The residual stream entering block ``layer`` ``(B, T, C)`` ->
        the logits after the last position ``(B, V)``."""
        tr = self.model.transformer
        for block in tr.h[layer:]:
            x = block(x, opts)
        return self.model.lm_head(tr.ln_f(x[:, -1])).float()

    def start_generation(self) -> KVCache:
        """An empty key/value cache for :meth:`step`."""
        return KVCache.empty(self.model.config.n_layer)

    @torch.inference_mode()
    @exact_fp32()
    def step(self, ids: list[int], cache: KVCache, opts: AttentionOptions) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Generation: the tokens after those in ``cache`` -> logits after the last one ``(V,)`` and
        each layer's pattern row of that last token ``(nh, S)`` over every token so far."""
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T_new)
        logits, patterns = self.model.decode(idx, cache, opts)  # (1, T_new, V), L × (1, nh, T_new, S)
        return logits[0, -1].float(), [p[0, :, -1].float() for p in patterns]

    @torch.inference_mode()
    @exact_fp32()
    def patterns(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids ``(B, T)`` -> the trained model's patterns ``(B, L, nh, T, T)`` on the CPU."""
        trace: list[AttentionTrace] = []
        self.model(idx.to(self.device), trace=trace)
        return torch.stack([t.pattern for t in trace], dim=1).float().cpu()  # L × (B, nh, T, T) -> (B, L, nh, T, T)


@torch.inference_mode()
@exact_fp32()
def top_logits(
    backend: Backend, hidden: torch.Tensor, k: int, temperature: float, chunk: int = 128
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The LM head over ``hidden (T, C)`` a chunk of positions at a time, keeping per position
    the top ``k`` logits ``(T, k)``, their ids ``(T, k)`` and ``logsumexp(logits / temperature)``
    ``(T,)`` float64: never a (T, vocab) tensor (206 MB for GPT-2 at 1024 tokens)."""
    values, indices, lse = [], [], []
    for start in range(0, hidden.shape[0], chunk):
        logits = backend.head(hidden[start : start + chunk]).float()  # (n, V)
        top = torch.topk(logits, k=min(k, logits.shape[-1]), dim=-1)
        scaled = logits / temperature if temperature != 1 else logits
        peak = scaled.gather(-1, top.indices[:, :1])  # (n, 1) the largest scaled logit
        lse.append(peak.double()[:, 0] + (scaled - peak).exp_().sum(-1).double().log())
        values.append(top.values)
        indices.append(top.indices)
    return torch.cat(values), torch.cat(indices), torch.cat(lse)


@dataclass
class LoadedModel:
    """A model ready to inspect: its backend, where it came from and what training measured."""

    backend: Backend
    path: Path
    training: dict = field(default_factory=dict)

    @property
    def model(self) -> torch.nn.Module:
        return self.backend.model

    @property
    def tokenizer(self):
        return self.backend.tokenizer

    @property
    def config(self):
        """The model's own config (:class:`~model.ours.gpt.GPTConfig` for ours)."""
        return self.backend.model.config

    @property
    def device(self) -> torch.device:
        return self.backend.device

    @property
    def facts(self) -> ModelFacts:
        return self.backend.facts
