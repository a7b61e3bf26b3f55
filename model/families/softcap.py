"""Attention logit softcapping (Gemma 2): ``softcap · tanh(scores / softcap)`` before the mask.

transformers hands the attention function the layer's ``softcap``; the scores softmax sees are
the scaled scores squashed into (−softcap, softcap). The step before the cap is kept as
``attn_scores_uncapped``; the unscaled what-if caps the raw scores the same way.
"""

from __future__ import annotations

import torch

from ..fields import fields_of
from ..trace import masked_scores

FIELDS = fields_of("softcap")  # the steps it adds: its rows of the field table


def capped(x: torch.Tensor, softcap: float) -> torch.Tensor:
    """``softcap · tanh(x / softcap)``, as eager attention computes it."""
    return torch.tanh(x / softcap) * softcap


def scores(
    raw: torch.Tensor, m: torch.Tensor, softcap: float, scaling: float | None, divisor: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(attn_scores, attn_scores_uncapped), each (B, nh, t, s): ``raw`` scaled (the model's own
    ``scaling`` multiplies, a what-if ``divisor`` divides), capped, then -inf where ``m`` is False."""
    uncapped = raw * scaling if divisor is None else raw / divisor
    return masked_scores(capped(uncapped, softcap), m), uncapped
