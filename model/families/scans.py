"""One value-linear layer's scan as recorded (:mod:`model.families.implicit`): the tensors it fed its own scan,
laid out per head, and its output; M from them a block of rows at a time (:mod:`model.families.mixers`).

How each wrapped scan function's arguments become a :class:`Scan`: ``gated_deltanet`` and ``kimi_delta``
(q and k l2-normalised and q scaled by ``d_k^-1/2`` here as the function does; grouped heads repeated),
``mamba2`` (Δ with its bias, softplus and limits; ``skip`` is D), ``mamba1`` (per channel, its gate silu(z)).
Batch row 0 is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from ..blocks import query_blocks
from . import mixers

PER_CHANNEL = ("mamba1", "short_conv")  # one M per channel, not per head


@dataclass
class Scan:
    """One layer's scan: ``parts`` per head as :mod:`model.families.mixers` reads them, ``v`` and
    ``out`` (heads, T, dv) (channels: (channels, T, 1)), ``skip`` (heads,) or None, and ``gate``
    (like ``out``) where the scan itself multiplies by its output gate (Mamba-1's silu(z)):
    ``out = (Σ_s M v + skip · v) · gate``."""

    layer: int
    mixer: str
    parts: dict[str, torch.Tensor]
    v: torch.Tensor
    out: torch.Tensor
    skip: torch.Tensor | None = None
    gate: torch.Tensor | None = None

    @property
    def per_channel(self) -> bool:
        """Whether M is one matrix per channel (Mamba-1, short convolutions), not per head."""
        return self.mixer in PER_CHANNEL

    def blocks(self, budget: int):
        """M a block of query rows at a time, first to last, within ``budget`` bytes of temporaries: yields
        ``(r0, r1, M[:, r0:r1, :])``; a delta rule's in its own chunks (a state carried from one to the next)."""
        if self.mixer in ("gated_deltanet", "kimi_delta"):
            p = self.parts
            yield from mixers.delta_blocks(p["q"], p["k"], p["g"], p["beta"])
            return
        heads, T = self.v.shape[0], self.v.shape[1]
        state = self.parts["A"].shape[-1] if self.mixer == "mamba1" else 1  # Mamba-1's rows: (heads, R, T, state)
        for r0, r1 in query_blocks(T, T, heads * state, budget):
            yield r0, r1, self.rows(r0, r1)

    def rows(self, r0: int, r1: int) -> torch.Tensor:
        """M for queries ``r0 .. r1 - 1``: (heads, r1 - r0, T)."""
        p = self.parts
        if self.mixer in ("gated_deltanet", "kimi_delta"):
            return mixers.delta_rows(p["q"], p["k"], p["g"], p["beta"], r0, r1)
        if self.mixer == "mamba2":
            return mixers.mamba2_rows(p["C"], p["B"], p["dt"], p["A"], r0, r1)
        if self.mixer == "lightning":
            return mixers.lightning_rows(p["q"], p["k"], p["slope"], r0, r1)
        if self.mixer == "mamba1":
            return mixers.mamba1_rows(p["C"], p["B"], p["dt"], p["A"], r0, r1)
        return mixers.short_conv_rows(p["B"], p["C"], p["weight"], r0, r1)


def _heads_first(x: torch.Tensor) -> torch.Tensor:
    """(batch, T, heads, ...) -> (heads, T, ...) of batch row 0, in float32."""
    return x[0].transpose(0, 1).float()


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


def _delta_scan(args, kwargs, result) -> Scan:
    names = ("query", "key", "value", "g", "beta")
    got = dict(zip(names, args)) | {n: kwargs[n] for n in names if n in kwargs}
    q, k, v = (_heads_first(got[n]) for n in ("query", "key", "value"))
    per = v.shape[0] // q.shape[0]  # grouped heads: each q/k head serves `per` value heads
    q, k = q.repeat_interleave(per, dim=0), k.repeat_interleave(per, dim=0)
    if kwargs.get("use_qk_l2norm_in_kernel", False):
        q, k = _l2norm(q), _l2norm(k)
    q = q * q.shape[-1] ** -0.5
    g, beta = got["g"][0].transpose(0, 1).float(), got["beta"][0].transpose(0, 1).float()
    out = result[0] if isinstance(result, tuple) else result
    mixer = "kimi_delta" if got["g"].dim() == 4 else "gated_deltanet"  # a decay per channel: Kimi's
    return Scan(-1, mixer, {"q": q, "k": k, "g": g, "beta": beta}, v, _heads_first(out))


def _mamba2_scan(args, kwargs, result) -> Scan:
    names = ("hidden_states", "dt", "A", "B", "C")
    got = dict(zip(names, args)) | {n: kwargs[n] for n in names if n in kwargs}
    x = got["hidden_states"]
    heads = x.shape[2]
    dt = got["dt"]
    if kwargs.get("dt_bias") is not None:
        dt = dt + kwargs["dt_bias"].to(dt.dtype)
    if kwargs.get("dt_softplus", False):
        dt = F.softplus(dt)
    low, high = kwargs.get("dt_limit", (0.0, float("inf")))
    dt = torch.clamp(dt, min=low, max=high)
    B, C = (_heads_first(got[n].float().repeat_interleave(heads // got[n].shape[2], dim=2)) for n in ("B", "C"))
    parts = {"B": B, "C": C, "dt": dt[0].transpose(0, 1).float(), "A": got["A"].float()}
    out = result[0] if isinstance(result, tuple) else result
    skip = None if kwargs.get("D") is None else kwargs["D"].detach().float()
    return Scan(-1, "mamba2", parts, _heads_first(x), _heads_first(out), skip)


def _mamba1_scan(args, kwargs, result) -> Scan:
    names = ("hidden_states", "dt", "A", "B", "C", "D", "z")
    got = dict(zip(names, args)) | {n: kwargs[n] for n in names if n in kwargs}
    dt = got["dt"]
    if kwargs.get("delta_bias") is not None:
        dt = dt + kwargs["delta_bias"].to(dt.dtype)[..., None]
    if kwargs.get("delta_softplus", False):
        dt = F.softplus(dt)
    # (batch, channels, T) and (batch, state, T), as the layer hands them over
    B, C = got["B"][0].T.float(), got["C"][0].T.float()
    parts = {"dt": dt[0].float(), "A": got["A"].detach().float(), "B": B, "C": C}
    x = got["hidden_states"][0].float()[..., None]
    out = (result[0] if isinstance(result, tuple) else result)[0].float()[..., None]
    skip = None if got.get("D") is None else got["D"].detach().float()
    gate = None if got.get("z") is None else F.silu(got["z"][0].float())[..., None]
    return Scan(-1, "mamba1", parts, x, out, skip, gate)


SCAN_RECORDS = {
    "gated_deltanet": _delta_scan,
    "kimi_delta": _delta_scan,
    "mamba2": _mamba2_scan,
    "mamba1": _mamba1_scan,
}
