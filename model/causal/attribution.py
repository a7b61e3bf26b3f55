"""Direct logit attribution: each component's direct contribution to one token's logit at one position.

The final norm's scale is frozen at its value on this text, so the norm is linear there: each
component's write (:mod:`.components`) goes through it and is dotted with the token's unembedding
row. ``sum(heads) + sum(mixers) + sum(mlps) + embed + rest = logit``, where ``rest`` holds the output
projections' biases, the final norm's offset (LayerNorm's bias) and the LM head's bias. The logit
is the LM head's, before any final softcap (Gemma 2 applies ``cap · tanh(logit / cap)`` after it).
On a hybrid (:data:`.components.HYBRIDS`) ``heads`` has a row per softmax layer only and each mixer
layer's write is one part of ``mixers``, not split per head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..precision import exact_fp32
from .components import Parts, _wide, capture, parts_of, weight, writes
from .norms import freeze


@dataclass
class Attribution:
    position: int
    token_id: int
    logit: float  # the LM head's logit of token_id at position (before a final softcap)
    heads: torch.Tensor  # (softmax layers, nh) float64
    mlps: torch.Tensor  # (L,)
    mixers: list[float | None]  # per layer: a mixer layer's write, None on a softmax layer
    unsplit: str | None  # caption-ready: which mixers' writes are one component each, None where there are none
    embed: float
    rest: float
    frozen: str  # caption-ready: what the split holds fixed
    final_softcap: float | None  # the cap the model applies after this logit, if any
    cross_heads: torch.Tensor | None = None  # (L, nh) an encoder-decoder's cross heads (:mod:`.seq2seq`); else None


@torch.inference_mode()
@exact_fp32()
def attribute(backend, ids: list[int], position: int, token_id: int | None = None) -> Attribution:
    """Each component's direct contribution to ``token_id``'s logit after ``position`` (default
    token: the model's top guess there). Only the tokens up to ``position`` are run."""
    parts = parts_of(backend, mixers=True)
    cap = capture(backend, parts, ids[: position + 1], [position])
    w = writes(parts, cap)
    final = parts.final_norm(cap.final)  # (1, C): what the LM head reads, computed by the model's own norm
    logits = parts.unembed(final)[0]  # (V,)
    if token_id is None:
        token_id = int(logits.argmax())
    direction, rest = _direction(parts, cap.final, token_id)
    heads = torch.stack([h[:, 0] @ direction for h, lp in zip(w.heads, parts.layers) if lp.mixer is None])
    mixers = [None if m is None else float(m[0] @ direction) for m in w.mixers]
    kinds = [f"layer {i} ({lp.mixer_name})" for i, lp in enumerate(parts.layers) if lp.mixer is not None]
    unsplit = f"{', '.join(kinds)}: each mixer's write is one component, not split per head" if kinds else None
    mlps = torch.stack([m[0] @ direction for m in w.mlps])  # (L,)
    rest = rest + float(sum(b[0] @ direction for b in w.bias))
    norms = ", ".join(["the final norm", *w.frozen])
    frozen = f"{norms}: scale frozen at {'its value' if not w.frozen else 'their values'} on this text"
    return Attribution(
        position=position,
        token_id=token_id,
        logit=float(logits[token_id]),
        heads=heads.cpu(),
        mlps=mlps.cpu(),
        mixers=mixers,
        unsplit=unsplit,
        embed=float(w.embed[0] @ direction),
        rest=rest,
        frozen=frozen,
        final_softcap=parts.final_softcap,
    )


def _direction(parts: Parts, final: torch.Tensor, token_id: int) -> tuple[torch.Tensor, float]:
    """The direction ``d`` (C,) with ``part · d`` a part's contribution to the logit through the
    frozen final norm, and what the norm's offset and the LM head's bias add."""
    frozen = freeze(parts.final_norm, final)  # mult (1, C)
    row = _wide(weight(parts.unembed)[token_id])  # (C,)
    d = frozen.mult[0] * row
    if frozen.centred:  # (x − mean x) · d = x · (d − mean d)
        d = d - d.mean()
    rest = 0.0 if frozen.offset is None else float(frozen.offset @ row)
    bias = getattr(parts.unembed, "bias", None)
    if bias is not None:
        rest += float(bias[token_id])
    return d, rest
