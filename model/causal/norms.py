"""A norm with its scale frozen: ``norm(x) = centre(x) · mult + offset``, linear in ``x``.

At a fixed position a LayerNorm divides by the standard deviation of its input and an RMSNorm by
its root mean square; holding that number at its value on the text (``1 / σ`` in ``mult``) makes
the norm a linear map of each part of the residual stream, plus its offset (LayerNorm's bias).
:func:`freeze` checks the frozen map against the module itself on the text, so a norm of another
form is refused (:class:`~model.causal.NotSplittable`), never split wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..placement import resident
from . import NotSplittable

CHECK_RTOL = {torch.float32: 1e-4, torch.float64: 1e-9}  # else (bf16, fp16) 2e-2


@dataclass
class Frozen:
    """``norm(x) ≈ centre(x) · mult + offset`` at the positions it was frozen at."""

    mult: torch.Tensor  # (..., C): gain / σ per position (and head, for a q/k norm)
    offset: torch.Tensor | None  # (C,) LayerNorm's bias; None for an RMSNorm
    centred: bool  # LayerNorm subtracts the mean first

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        """A part ``x`` (..., C) of the norm's input -> its part of the output (no offset)."""
        if self.centred:
            x = x - x.mean(dim=-1, keepdim=True)
        return x * self.mult


def gain(norm: torch.nn.Module) -> torch.Tensor:
    """What an RMSNorm multiplies the normalised input by: ``weight``, or ``1 + weight`` (Gemma)."""
    weight = resident(norm, "weight").double()
    return 1.0 + weight if "Gemma" in type(norm).__name__ else weight


def epsilon(norm: torch.nn.Module) -> float:
    for name in ("variance_epsilon", "eps", "epsilon"):
        value = getattr(norm, name, None)
        if value is not None:
            return float(value)
    raise NotSplittable(f"{type(norm).__name__}: a norm without a known epsilon cannot be frozen")


def freeze(norm: torch.nn.Module, x: torch.Tensor) -> Frozen:
    """``norm`` at the input ``x`` (..., C) (the full residual stream, or a full q / k head) frozen
    into a linear map, checked against ``norm(x)`` computed by the module itself."""
    x64 = x.double()
    eps = epsilon(norm)
    name = type(norm).__name__
    if isinstance(norm, torch.nn.LayerNorm) or ("LayerNorm" in name and "T5" not in name):  # T5's is an RMSNorm
        centred = x64 - x64.mean(dim=-1, keepdim=True)
        inv = torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)
        weight = (
            resident(norm, "weight").double()
            if norm.weight is not None
            else torch.ones(x.shape[-1], dtype=torch.float64, device=x.device)
        )
        bias = resident(norm, "bias")
        frozen = Frozen(inv * weight, None if bias is None else bias.double(), True)
    else:
        inv = torch.rsqrt(x64.pow(2).mean(dim=-1, keepdim=True) + eps)
        frozen = Frozen(inv * gain(norm), None, False)
    _check(norm, x, frozen)
    return frozen


def _check(norm: torch.nn.Module, x: torch.Tensor, frozen: Frozen) -> None:
    """The frozen map gives what the module gives on ``x``; else the norm is of a form not known here."""
    want = norm(x).double()
    got = frozen.linear(x.double()) + (0.0 if frozen.offset is None else frozen.offset)
    rtol = CHECK_RTOL.get(x.dtype, 2e-2)
    if not torch.allclose(got, want, rtol=rtol, atol=rtol * (1.0 + float(want.abs().max()))):
        raise NotSplittable(
            f"{type(norm).__name__}: not a LayerNorm or RMSNorm attnscope can freeze (its frozen form differs "
            f"from the module by {float((got - want).abs().max()):.3g})"
        )
