"""One call that runs the model on a text and keeps every attention step.

>>> trace = inspect(model, tokenizer, "The cat sat on the mat.")
>>> trace.pattern.shape          # (n_layer, n_head, T, T)

``causal=False`` and another ``scale`` rerun the forward pass with that change in every
layer (a what-if: the model was trained causal with its own divisor, ``sqrt(head_dim)`` for
ours). Any backend of :mod:`model.backends` works, so any family is inspected the same way. Nothing is stored on
the model, so concurrent calls with different options do not interfere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from .backends import Backend, OursBackend
from .options import AttentionOptions
from .ours.gpt import GPT
from .precision import exact_fp32
from .stats import head_stats_arrays
from .trace import AttentionTrace, HeadFields

Scale = str | float  # "model", "sqrt_dk", "none" or a positive number the scores are divided by


def scale_divisor(scale: Scale, head_dim: int) -> float | None:
    """The number raw scores are divided by: ``None`` for the model's own ("model"),
    sqrt(d_k) ("sqrt_dk"), 1 ("none") or the given number."""
    if scale == "model":
        return None
    if scale == "sqrt_dk":
        return math.sqrt(head_dim)
    if scale == "none":
        return 1.0
    value = float(scale)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"scale must be 'model', 'sqrt_dk', 'none' or a positive number, got {scale!r}")
    return value


@dataclass
class Trace(HeadFields):
    """Everything one forward pass computed, batch dimension dropped.

    ``fields``: each step of the field table the layers computed, stacked over layers:
    ``q``, ``k`` (one per query head), ``v`` ``(L, nh, T, hs)``; ``attn_scores_raw``,
    ``attn_scores`` (-inf where masked), ``pattern``, ``pattern_unscaled`` ``(L, nh, T, T)``;
    where the model has them ``sink_mass`` and ``gate`` ``(L, nh, T)``, ``pattern_parts``
    ``(L, nh, 2, T, T)``, ...; each read as an attribute (``trace.pattern``, ``None`` where absent).
    ``divisor`` is the first layer's (models that divide by the layer index have one per layer).
    """

    text: str
    tokens: list[str]
    token_ids: list[int]
    offsets: list[tuple[int, int]]
    causal: bool
    divisor: float  # the divisor used
    mask: torch.Tensor  # (T, T) bool, True = may attend
    fields: dict[str, torch.Tensor]  # name -> (L, nh, T, ·)
    z: torch.Tensor  # (L, nh, T, hs)
    logits: torch.Tensor  # (T, vocab)
    softcap: float | None = None
    layer_divisors: list[float] | None = None  # each layer's divisor (some models divide by the layer index)
    layer_masks: torch.Tensor | None = None  # (L, T, T): sliding-window layers differ from ``mask``
    sink_logit: torch.Tensor | None = None  # (L, nh): each head's sink logit; None: no sinks

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)


def _stack(traces: list[AttentionTrace], name: str) -> torch.Tensor:
    return torch.stack([getattr(t, name)[0] for t in traces])  # L × (nh, T, ·) -> (L, nh, T, ·)


def as_backend(model: GPT | Backend, tokenizer=None) -> Backend:
    """A :class:`~model.backends.Backend` as is; our :class:`GPT` wrapped in :class:`OursBackend`."""
    if isinstance(model, GPT):
        p = next(model.parameters())
        return OursBackend(model, tokenizer, p.device, p.dtype)
    return model


@torch.inference_mode()
@exact_fp32()
def inspect_ids(
    model, token_ids: list[int], causal: bool = True, scale: Scale = "model", logits: bool = True, tokenizer=None
) -> tuple[list[AttentionTrace], torch.Tensor | None, float]:
    """Run ``token_ids`` through the explicit attention path; (traces, logits (T, V), divisor).

    ``logits=False`` skips the LM head (logits ``None``): for views that need no predictions."""
    backend = as_backend(model, tokenizer)
    opts = AttentionOptions(causal=causal, divisor=scale_divisor(scale, backend.facts.head_dim))
    traces: list[AttentionTrace] = []
    out = backend.run(token_ids, opts, traces, logits=logits)
    return traces, out, traces[0].divisor


def inspect(model, tokenizer, text: str, causal: bool = True, scale: Scale = "model") -> Trace:
    """Tokenize ``text`` and run it, keeping q, k, v, scores, masks and patterns per layer/head.

    ``model``: our :class:`GPT` (with its ``tokenizer``) or any backend of :mod:`model.backends`."""
    backend = as_backend(model, tokenizer)
    tokenizer = backend.tokenizer
    enc = tokenizer.encode(text)
    if not enc.ids:
        raise ValueError("text has no tokens")
    if len(enc.ids) > backend.facts.block_size:
        raise ValueError(f"text is {len(enc.ids)} tokens; the model's context is {backend.facts.block_size}")
    traces, logits, divisor = inspect_ids(backend, enc.ids, causal=causal, scale=scale)
    return Trace(
        text=text,
        tokens=enc.tokens,
        token_ids=enc.ids,
        offsets=enc.offsets,
        causal=causal,
        divisor=divisor,
        mask=traces[0].mask,
        logits=logits,
        softcap=traces[0].softcap,
        layer_divisors=[t.divisor for t in traces],
        layer_masks=torch.stack([t.mask for t in traces]),
        sink_logit=torch.stack([t.sink_logit for t in traces]) if traces[0].sink_logit is not None else None,
        fields={name: _stack(traces, name) for name in traces[0].fields},
        z=_stack(traces, "z"),
    )


# ------------------------------------------------------------------ statistics


def row_entropy(pattern: torch.Tensor) -> torch.Tensor:
    """(..., T, T) -> (..., T) entropy in nats of each row (0·log 0 taken as 0)."""
    return -(pattern * torch.log(pattern.clamp_min(1e-30))).sum(-1)


def masked_var(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Population variance of ``x (..., T, T)`` over entries where ``mask (T, T)`` is True -> (...)."""
    m = mask.to(x.dtype)
    n = m.sum()
    xz = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
    mean = xz.sum((-2, -1)) / n
    return (((xz - mean[..., None, None]) * m) ** 2).sum((-2, -1)) / n


@dataclass
class HeadStatsTensors:
    """Per-head statistics, each a tensor ``(L, nh)`` (``row_*`` are ``(L, nh, T)``)."""

    var_q: torch.Tensor
    var_k: torch.Tensor
    mean_scores_raw: torch.Tensor
    mean_scores: torch.Tensor
    var_scores_raw: torch.Tensor
    var_scores: torch.Tensor
    variance_ratio: torch.Tensor
    entropy: torch.Tensor
    entropy_unscaled: torch.Tensor
    max_weight: torch.Tensor
    max_weight_unscaled: torch.Tensor
    row_entropy: torch.Tensor
    row_entropy_unscaled: torch.Tensor


def head_stats(trace: Trace) -> HeadStatsTensors:
    """Variances over unmasked entries, and entropy and peakiness of each head's rows
    (:func:`model.stats.head_stats_arrays`, the one implementation, over all layers at once).

    ``variance_ratio`` is var(raw) / var(scaled), which is ``divisor²`` (= d_k for the
    default) whenever the scores vary; where the scaled scores do not vary (a single
    unmasked score, T = 1) it is 0 / 0: NaN, undefined (``null`` in the API). With differential
    attention the statistics are those of each pair's first softmax, as the capture's.
    """
    softmax = trace.pattern if trace.pattern_parts is None else trace.pattern_parts[:, :, 0]
    masks = trace.layer_masks if trace.layer_masks is not None else trace.mask[None].expand(len(trace.q), -1, -1)
    layers = [  # one layer at a time, each with its own mask (sliding-window layers differ) and divisor
        head_stats_arrays(
            trace.q[i],
            trace.k[i],
            trace.attn_scores_raw[i],
            trace.attn_scores[i],
            softmax[i],
            masks[i],
            trace.layer_divisors[i] if trace.layer_divisors else trace.divisor,
            trace.softcap,
            None if trace.sink_logit is None else trace.sink_logit[i],  # (nh,): the sink's column of every row
        )
        for i in range(len(trace.q))
    ]
    return HeadStatsTensors(**{name: torch.stack([layer[name] for layer in layers]) for name in layers[0]})


@dataclass
class Guess:
    token: str
    id: int
    prob: float


def predictions(trace: Trace, tokenizer, top_k: int = 5, temperature: float = 1.0) -> list[list[Guess]]:
    """Top-``top_k`` next tokens after each position, from ``softmax(logits / temperature)``."""
    if top_k == 0:
        return [[] for _ in range(trace.n_tokens)]
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    probs = F.softmax(trace.logits.float() / temperature, dim=-1)  # (T, V)
    top = torch.topk(probs, k=min(top_k, probs.size(-1)), dim=-1)
    out = []
    for p_row, i_row in zip(top.values.tolist(), top.indices.tolist()):
        out.append([Guess(token=tokenizer.display(i), id=i, prob=p) for p, i in zip(p_row, i_row)])
    return out
