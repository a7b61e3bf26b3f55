"""One call that runs the model on a text and keeps every attention step.

>>> trace = inspect(model, tokenizer, "The cat sat on the mat.")
>>> trace.pattern.shape          # (n_layer, n_head, T, T)

``causal=False`` and another ``scale`` rerun the forward pass with that change in every
layer (a what-if: the model was trained causal with ``sqrt(head_dim)``). Nothing is stored on
the model, so concurrent calls with different options do not interfere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from .gpt import GPT, AttentionOptions, AttentionTrace

Scale = str | float  # "sqrt_dk", "none" or a positive number the scores are divided by


def scale_divisor(scale: Scale, head_dim: int) -> float:
    """The number raw scores are divided by: sqrt(d_k), 1 ("none") or the given number."""
    if scale == "sqrt_dk":
        return math.sqrt(head_dim)
    if scale == "none":
        return 1.0
    value = float(scale)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"scale must be 'sqrt_dk', 'none' or a positive number, got {scale!r}")
    return value


@dataclass
class Trace:
    """Everything one forward pass computed, batch dimension dropped.

    Per-step tensors are stacked over layers: ``(n_layer, n_head, T, ·)``.
    """

    text: str
    tokens: list[str]
    token_ids: list[int]
    offsets: list[tuple[int, int]]
    causal: bool
    scale: float  # the divisor used
    mask: torch.Tensor  # (T, T) bool, True = may attend
    q: torch.Tensor  # (L, nh, T, hs)
    k: torch.Tensor  # (L, nh, T, hs)
    v: torch.Tensor  # (L, nh, T, hs)
    attn_scores_raw: torch.Tensor  # (L, nh, T, T)
    attn_scores: torch.Tensor  # (L, nh, T, T), -inf where masked
    pattern: torch.Tensor  # (L, nh, T, T)
    pattern_unscaled: torch.Tensor  # (L, nh, T, T)
    z: torch.Tensor  # (L, nh, T, hs)
    logits: torch.Tensor  # (T, vocab)

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)


def _stack(traces: list[AttentionTrace], name: str) -> torch.Tensor:
    return torch.stack([getattr(t, name)[0] for t in traces])  # L × (nh, T, ·) -> (L, nh, T, ·)


@torch.inference_mode()
def inspect_ids(
    model: GPT, token_ids: list[int], causal: bool = True, scale: Scale = "sqrt_dk", logits: bool = True
) -> tuple[list[AttentionTrace], torch.Tensor | None, float]:
    """Run ``token_ids`` through the explicit attention path; (traces, logits (T, V), divisor).

    ``logits=False`` skips the LM head (logits ``None``): for views that need no predictions."""
    divisor = scale_divisor(scale, model.config.head_dim)
    opts = AttentionOptions(causal=causal, scale=divisor)
    device = next(model.parameters()).device
    idx = torch.tensor([token_ids], dtype=torch.long, device=device)  # (1, T)
    traces: list[AttentionTrace] = []
    if not logits:
        model.hidden_states(idx, opts=opts, trace=traces)
        return traces, None, divisor
    out, _ = model(idx, opts=opts, trace=traces)  # (1, T, V)
    return traces, out[0], divisor


def inspect(model: GPT, tokenizer, text: str, causal: bool = True, scale: Scale = "sqrt_dk") -> Trace:
    """Tokenize ``text`` and run it, keeping q, k, v, scores, masks and patterns per layer/head."""
    enc = tokenizer.encode(text)
    if not enc.ids:
        raise ValueError("text has no tokens")
    if len(enc.ids) > model.config.block_size:
        raise ValueError(f"text is {len(enc.ids)} tokens; the model's context is {model.config.block_size}")
    traces, logits, divisor = inspect_ids(model, enc.ids, causal=causal, scale=scale)
    return Trace(
        text=text,
        tokens=enc.tokens,
        token_ids=enc.ids,
        offsets=enc.offsets,
        causal=causal,
        scale=divisor,
        mask=traces[0].mask,
        logits=logits,
        **{
            name: _stack(traces, name)
            for name in ("q", "k", "v", "attn_scores_raw", "attn_scores", "pattern", "pattern_unscaled", "z")
        },
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
class HeadStats:
    """Per-head statistics, each a tensor ``(L, nh)`` (``row_*`` are ``(L, nh, T)``)."""

    var_q: torch.Tensor
    var_k: torch.Tensor
    var_scores_raw: torch.Tensor
    var_scores: torch.Tensor
    variance_ratio: torch.Tensor
    entropy: torch.Tensor
    entropy_unscaled: torch.Tensor
    max_weight: torch.Tensor
    max_weight_unscaled: torch.Tensor
    row_entropy: torch.Tensor
    row_entropy_unscaled: torch.Tensor


def head_stats(trace: Trace) -> HeadStats:
    """Variances over unmasked entries, and entropy and peakiness of each head's rows.

    ``variance_ratio`` is var(raw) / var(scaled), which is ``scale²`` (= d_k for the default
    scale) whenever the scores vary; with a single unmasked score (T = 1) both variances are 0
    and the ratio is reported as ``scale²``, its value in the limit.
    """
    var_raw = masked_var(trace.attn_scores_raw, trace.mask)
    var_scaled = masked_var(trace.attn_scores_raw / trace.scale, trace.mask)
    ratio = torch.where(var_scaled > 0, var_raw / var_scaled.clamp_min(1e-30), torch.full_like(var_raw, trace.scale**2))
    ent, ent_u = row_entropy(trace.pattern), row_entropy(trace.pattern_unscaled)  # (L, nh, T)
    return HeadStats(
        var_q=trace.q.var(dim=(-2, -1), unbiased=False),
        var_k=trace.k.var(dim=(-2, -1), unbiased=False),
        var_scores_raw=var_raw,
        var_scores=var_scaled,
        variance_ratio=ratio,
        entropy=ent.mean(-1),
        entropy_unscaled=ent_u.mean(-1),
        max_weight=trace.pattern.amax(-1).mean(-1),
        max_weight_unscaled=trace.pattern_unscaled.amax(-1).mean(-1),
        row_entropy=ent,
        row_entropy_unscaled=ent_u,
    )


@dataclass
class Prediction:
    token: str
    id: int
    prob: float


def predictions(trace: Trace, tokenizer, top_k: int = 5, temperature: float = 1.0) -> list[list[Prediction]]:
    """Top-``top_k`` next tokens after each position, from ``softmax(logits / temperature)``."""
    if top_k == 0:
        return [[] for _ in range(trace.n_tokens)]
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    probs = F.softmax(trace.logits.float() / temperature, dim=-1)  # (T, V)
    top = torch.topk(probs, k=min(top_k, probs.size(-1)), dim=-1)
    out = []
    for p_row, i_row in zip(top.values.tolist(), top.indices.tolist()):
        out.append([Prediction(token=tokenizer.display(i), id=i, prob=p) for p, i in zip(p_row, i_row)])
    return out
