"""Learned attention sinks (gpt-oss): one logit per head, one more column of every row's softmax.

transformers passes it as ``s_aux`` (nh,). The sink's column takes its share of each row and is
then dropped, so a row of ``pattern`` sums to 1 − ``sink_mass``, exactly as the model computes it,
never renormalised.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ..fields import fields_of

FIELDS = fields_of("sinks")  # the steps it adds: its rows of the field table


def softmax(scores: torch.Tensor, sink_logit: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, nh, t, s) scores -> the pattern (B, nh, t, s) and, with a sink, its weight (B, nh, t)."""
    if sink_logit is None:
        return F.softmax(scores, dim=-1, dtype=torch.float32), None
    column = sink_logit.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)  # (B, nh, t, 1)
    weights = F.softmax(torch.cat([scores, column], dim=-1), dim=-1, dtype=torch.float32)  # (B, nh, t, s + 1)
    return weights[..., :-1], weights[..., -1]  # the sink's column dropped, as the model does
