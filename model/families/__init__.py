"""What each family's attention adds to eager attention's steps, one module per feature.

:func:`model.families.attention.attnscope_attention` builds the mask, the scale and chooses the path;
the steps themselves are :func:`eager_steps`, eager attention's arithmetic, into which each feature
a layer has puts its part:

* :mod:`.softcap` (Gemma 2): the scores capped by ``softcap · tanh(· / softcap)``;
* :mod:`.sinks` (gpt-oss): a learned sink logit as one more softmax column;
* :mod:`.mla` (DeepSeek): q·kᵀ in its content and position parts;
* :mod:`.gates` (Qwen3-Next): each head's output gate per query;
* :mod:`.differential` (DiffLlama): pairs of softmaxes, recorded as one signed map per pair.

DeBERTa-v2/v3 computes attention in its own module, not through these steps: :mod:`.deberta` records
it, q·kᵀ in three terms, and :mod:`.encoder` opens the encoders (BERT and its kin).

Each module's ``FIELDS`` are the steps it adds: the rows of :mod:`model.fields`' table whose
``layers`` name the module.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..trace import head_major, masked_scores
from . import differential, gates, mla, sinks, softcap

# in a layer's extras: its scores are shifted by a position bias (T5), not a multiple of the raw ones
BIAS = "position_bias"


@dataclass(frozen=True)
class Features:
    """The features one attention layer has (each None where it has not)."""

    softcap: float | None = None
    sink_logit: torch.Tensor | None = None  # (nh,)
    nope: int | None = None  # MLA: the width of the no-RoPE part of q and k
    gate: torch.Tensor | None = None  # (B, nh, T)
    differential: bool = False
    bias: torch.Tensor | None = None  # (B|1, nh, T, S): T5's relative position bias, added to the scaled scores

    @property
    def extras(self) -> frozenset[str]:
        """The steps only some layers compute that this one does."""
        have = (
            (softcap.FIELDS, self.softcap is not None),
            (sinks.FIELDS, self.sink_logit is not None),
            (mla.FIELDS, self.nope is not None),
            (gates.FIELDS, self.gate is not None),
            (differential.FIELDS, self.differential),
            ((BIAS,), self.bias is not None),
        )
        return frozenset(name for names, on in have if on for name in names)

    @property
    def eager_only(self) -> bool:
        """Whether the fused kernel cannot compute this layer (a softcap, sinks)."""
        return self.softcap is not None or self.sink_logit is not None


def eager_steps(query, k, v, mask, f: Features, scaling: float | None, divisor: float | None, unscaled: bool):
    """``steps(q0, q1, s)``: query rows q0..q1 over the first s keys, eager attention step by step.

    ``query``, ``k``, ``v`` (B, nh, T|S, hs), k and v one per query head; ``mask`` (T, S) or (nh, T, S) bool;
    exactly one of ``scaling`` (the model's own: eager's multiplication) and ``divisor`` (a what-if:
    a division); ``unscaled``: whether ``pattern_unscaled`` is computed."""
    k, v = head_major(k), head_major(v)  # a block's keys: one matrix per head

    def steps(q0: int, q1: int, s: int) -> dict[str, torch.Tensor | None]:
        m = mask[..., q0:q1, :s]  # (t, s), or (nh, t, s) with edges knocked out
        attn_scores_raw = torch.matmul(query[:, :, q0:q1], k[:, :, :s].transpose(2, 3))  # (B, nh, t, s)
        st: dict[str, torch.Tensor | None] = dict(attn_scores_raw=attn_scores_raw)
        if f.nope is not None:  # the same product, its two halves apart: content + position = raw
            st.update(mla.score_parts(query, k, q0, q1, s, f.nope))
        bias = None if f.bias is None else f.bias[..., q0:q1, :s]  # T5: (B|1, nh, t, s)
        if f.softcap is None:
            st["attn_scores"] = masked_scores(attn_scores_raw, m, divisor=divisor, scaling=scaling)  # (B, nh, t, s)
            if bias is not None:  # eager's order: the scaled product, then the bias (then the mask: -inf stays)
                st["attn_scores"] = st["attn_scores"] + bias
        else:
            st["attn_scores"], st["attn_scores_uncapped"] = softcap.scores(
                attn_scores_raw, m, f.softcap, scaling, divisor
            )
        pattern, sink_mass = sinks.softmax(st["attn_scores"], f.sink_logit)  # (B, nh, t, s), (B, nh, t) or None
        st["pattern"] = pattern.to(query.dtype)
        st["pattern_unscaled"] = None
        if unscaled:
            raw = attn_scores_raw if f.softcap is None else softcap.capped(attn_scores_raw, f.softcap)
            st["pattern_unscaled"] = sinks.softmax(masked_scores(raw, m), f.sink_logit)[0]
        if sink_mass is not None:
            st["sink_mass"] = sink_mass
        if f.gate is not None:
            st["gate"] = f.gate[:, :, q0:q1]
        st["z"] = torch.matmul(st["pattern"], v[:, :, :s])  # (B, nh, t, s) @ (B, nh, s, hs) -> (B, nh, t, hs)
        return st

    return steps
