"""Multi-head latent attention (DeepSeek): q and k are ``[no-RoPE part | RoPE part]``.

q·kᵀ then splits in two: the content part (the no-RoPE halves) and the position part (the RoPE
halves), and ``attn_scores_content + attn_scores_position = attn_scores_raw``.
"""

from __future__ import annotations

import torch

from ..fields import fields_of

FIELDS = fields_of("mla")  # the steps it adds: its rows of the field table


def nope_dim(module: torch.nn.Module) -> int | None:
    """The width of the no-RoPE part of a head's query and key; None for a layer without MLA."""
    return getattr(module, "qk_nope_head_dim", None) if getattr(module, "qk_rope_head_dim", None) else None


def score_parts(query: torch.Tensor, k: torch.Tensor, q0: int, q1: int, s: int, nope: int) -> dict[str, torch.Tensor]:
    """Query rows q0..q1 over the first s keys: q·kᵀ's two parts, each (B, nh, t, s)."""
    q = query[:, :, q0:q1]
    return dict(
        attn_scores_content=torch.matmul(q[..., :nope], k[:, :, :s, :nope].transpose(2, 3)),
        attn_scores_position=torch.matmul(q[..., nope:], k[:, :, :s, nope:].transpose(2, 3)),
    )
