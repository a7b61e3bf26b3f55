"""Gated attention (Qwen3-Next): each head's output multiplied by sigmoid(gate) before ``o_proj``.

``q_proj`` makes each head's query and a gate of the same size side by side; the gate is applied
after the attention function, outside anything it sees. A forward hook on each such ``q_proj``
hands its output to a callback (:func:`model.families.attention.watch_output_gates` leaves it with the
running recording); :func:`gate_of` turns it into ``gate``, each head's mean gate per query.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..fields import fields_of

FIELDS = fields_of("gates")  # the steps it adds: its rows of the field table


def watch(model: torch.nn.Module, keep: Callable[[torch.nn.Module, torch.Tensor], None]) -> int:
    """A hook on every gated attention module's ``q_proj`` calling ``keep(module, output)``;
    returns how many layers are gated."""
    n = 0
    for module in model.modules():
        q_proj, o_proj = getattr(module, "q_proj", None), getattr(module, "o_proj", None)
        head_dim = getattr(module, "head_dim", None)
        if q_proj is None or o_proj is None or not head_dim or not hasattr(q_proj, "out_features"):
            continue
        if q_proj.out_features != 2 * o_proj.in_features:  # a query and a gate per head
            continue
        q_proj.register_forward_hook(lambda _m, _inp, out, owner=module: keep(owner, out))
        n += 1
    return n


def gate_of(out: torch.Tensor, B: int, T: int, nh: int, hs: int) -> torch.Tensor:
    """(B, nh, T): each head's output gate at each query, sigmoid averaged over the head's dimensions,
    from ``q_proj``'s output (B, T, nh · 2hs)."""
    logits = out.view(B, T, nh, 2 * hs)[..., hs:]  # (B, T, nh, hs): the gate half of each head's projection
    return torch.sigmoid(logits.float()).mean(-1).transpose(1, 2)  # (B, nh, T)
