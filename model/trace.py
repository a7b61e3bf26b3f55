"""The explicit attention path, shared by both backends: named steps handed to a sink.

When a forward pass is given a ``trace`` sink, each attention layer that the sink :func:`wants`
computes its attention one named tensor per step (``q``, ``k``, ``v``, ``attn_scores_raw``,
``attn_scores``, ``pattern``, ``z``, ``mask``) in a ``steps`` function of its own, and
:func:`traced_attention` hands those steps to the sink:

* a plain ``list`` gets one :class:`AttentionTrace` of whole tensors per layer;
* a *blockwise* sink (:class:`model.capture.Capture`) gets them a block of query rows at a time
  and reduces each block as it arrives, so no ``(nh, T, S)`` tensor ever exists.

Our GPT (:mod:`model.ours.gpt`) and the transformers backend (:mod:`model.families.attention`) both build
their steps from :func:`attention_mask` and :func:`masked_scores`, so everything above the
model is written once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from .fields import FIELD_NAMES


class HeadFields:
    """A record's per-head fields by the names of :mod:`model.fields`' table, kept in ``fields`` and
    read as attributes (``trace.pattern``); a field of the table the record does not hold (the
    layer does not compute it, or the sink did not want it) reads ``None``."""

    fields: dict[str, torch.Tensor]

    def __getattr__(self, name: str):
        if name in FIELD_NAMES:
            return self.__dict__.get("fields", {}).get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


@dataclass
class AttentionTrace(HeadFields):
    """Every step of one layer's attention, each ``(B, nh, T, ·)``; ``mask`` is ``(T, T)``.

    ``fields``: the layer's steps by the field table's names: ``q``, ``k``, ``v`` (B, nh, T, hs)
    (with grouped-query attention ``k`` and ``v`` already one per query head), ``attn_scores_raw``
    (q @ kᵀ), ``attn_scores`` (raw / divisor, then softcapped, -inf where masked), ``pattern``
    (softmax(attn_scores)), ``pattern_unscaled`` (the same with divisor 1; absent when the sink
    said it does not need it, ``needs_unscaled = False``: one more T×T softmax per layer), each
    (B, nh, T, T), and what only some layers compute (``sink_mass`` (B, nh, T), ``pattern_parts``
    (B, nh, 2, T, T), ...: :data:`model.fields.LAYER_DEPENDENT`).
    """

    fields: dict[str, torch.Tensor]
    z: torch.Tensor  # (B, nh, T, hs)  pattern @ v
    mask: torch.Tensor  # (T, T) bool, True = may attend
    divisor: float = field(default=1.0)
    softcap: float | None = None  # scores = softcap · tanh(scores / softcap) before the mask (Gemma 2)
    layer: int = 0
    window: int | None = None  # the sliding window the mask applied, in tokens (the query and the W − 1 before it)
    sink_logit: torch.Tensor | None = None  # (nh,) each head's learned sink logit; None: no sinks


def needs_unscaled(sink, layer: int | None = None) -> bool:
    """Whether a trace sink wants ``pattern_unscaled`` (a plain list does); with ``layer``, in that layer,
    where the sink says so layer by layer (``needs_unscaled_at``: :class:`model.capture.Capture`)."""
    at = getattr(sink, "needs_unscaled_at", None)
    if layer is not None and at is not None:
        return at(layer)
    return getattr(sink, "needs_unscaled", True)


def wants(sink, layer: int) -> bool:
    """Whether ``sink`` wants this layer's steps: a plain list wants every layer; a sink with a
    ``wants`` method (:class:`model.capture.Capture`) may leave a layer to the fast path."""
    return sink is not None and getattr(sink, "wants", lambda _: True)(layer)


@functools.lru_cache(maxsize=2)
def attention_mask(T: int, causal: bool, device: torch.device | str = "cpu") -> torch.Tensor:
    """(T, T) boolean mask, True where query row t may attend to key column s. One tensor for
    every layer of a forward pass (the last two kept for the next request): never written to."""
    full = torch.ones(T, T, dtype=torch.bool, device=device)
    return torch.tril(full) if causal else full


def masked_scores(
    raw: torch.Tensor, m: torch.Tensor, divisor: torch.Tensor | float | None = None, scaling: float | None = None
) -> torch.Tensor:
    """``raw`` (..., t, s) divided by ``divisor`` or multiplied by ``scaling`` (or neither), with
    -inf where the (t, s) mask ``m`` is False: each result bitwise what the scaling then
    ``masked_fill`` gives. On the CPU in one pass, the mask added as a (t, s) bias of 0 and -inf
    (``torch.addcdiv``, ``torch.add(alpha=)``): ``masked_fill`` with a mask broadcast over the
    heads costs 8× a plain pass there (torch 2.13). On a GPU ``masked_fill`` itself, so that a
    score that overflowed to +inf in a masked half-precision cell becomes -inf, not NaN."""
    if raw.device.type == "cpu":
        bias = torch.zeros(m.shape, dtype=raw.dtype, device=raw.device).masked_fill_(~m, float("-inf"))
        if divisor is not None:
            if not isinstance(divisor, torch.Tensor):
                divisor = torch.full((), divisor, dtype=raw.dtype)
            return torch.addcdiv(bias, raw, divisor)  # bias + raw / divisor
        if scaling is not None:
            return torch.add(bias, raw, alpha=scaling)  # bias + scaling · raw
        return raw + bias
    scaled = raw / divisor if divisor is not None else raw * scaling if scaling is not None else raw
    return scaled.masked_fill(~m, float("-inf"))


def head_major(x: torch.Tensor) -> torch.Tensor:
    """``x`` (B, nh, S, hs) laid out head by head (contiguous), once a layer before its blocks: a block's keys
    ``x[:, :, :s]`` are then one matrix per head with rows of hs; in the layout projections give (B, S, nh, hs)
    transposed, ``matmul`` runs a block's q·kᵀ and p·v 1.6× slower on the CPU (torch 2.13: 9 heads of 64 over
    4,096 keys), and bitwise the same. Grouped-query keys are copied so already (``repeat_interleave``)."""
    return x.contiguous()


def sees_later(mask: torch.Tensor) -> bool:
    """Whether a ``(T, S)`` mask lets some query see a key after its own position (one host sync)."""
    T, S = mask.shape
    return bool(mask.triu(S - T + 1).any())


def traced_attention(
    trace, layer, q, k, v, mask, divisor, steps,
    causal=True, softcap=None, window=None, sink_logit=None, extras=frozenset(), heads=None,
):
    """The explicit path into ``trace``; returns z ``(B, nh, T, hs)``.

    ``steps(q0, q1, s)`` computes the named steps of query rows ``q0 .. q1`` over the first ``s``
    keys (and ``sink_mass``, each row's weight on a learned sink, where ``sink_logit`` is given);
    ``extras`` names the steps only some layers have (:data:`model.fields.LAYER_DEPENDENT`) that
    this layer's ``steps`` compute; ``heads``, how many (B, ·, t, s) matrices of a head's size a
    block's steps hold at once where that is not ``q``'s heads. A plain list gets all rows at
    once, as one :class:`AttentionTrace`. A *blockwise* sink (:class:`model.capture.Capture`) gets
    them a block of rows at a time (``trace.blocks``) and reduces each block as it comes, so no
    ``(nh, T, S)`` tensor ever exists; with ``causal`` a block's keys stop at its last query, so
    ``causal`` must hold only where the mask hides every key after its query (:func:`sees_later`:
    Gemma 3's image tokens see each other both ways, and such a layer gets every key in every block).
    """
    T, S = mask.shape
    if not getattr(trace, "blockwise", False):
        st = steps(0, T, S)
        kept = {"q": q, "k": k, "v": v, **{name: t for name, t in st.items() if name != "z" and t is not None}}
        trace.append(
            AttentionTrace(
                fields=kept, z=st["z"], mask=mask, divisor=divisor, softcap=softcap, layer=layer, window=window,
                sink_logit=sink_logit,
            )
        )
        return st["z"]
    keep = getattr(trace, "keep_steps", None)
    if keep is not None:  # a sink that asks for the steps themselves, to call again later (model.compare)
        keep(layer, steps)
    trace.begin(layer, q, k, v, mask, divisor, softcap, window, sink_logit, extras)
    zs = []
    for q0, q1 in trace.blocks(T, S, heads or q.shape[1]):
        st = steps(q0, q1, min(S, S - T + q1) if causal else S)
        trace.block(q0, q1, st)
        zs.append(st["z"])
    z = torch.cat(zs, dim=2) if len(zs) > 1 else zs[0]  # (B, nh, T, hs)
    trace.end(z)
    return z
