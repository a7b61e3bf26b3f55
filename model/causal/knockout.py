"""Attention knockout: chosen edges (query, key) of a layer's heads removed from the mask.

An edge's score becomes -inf before that layer's softmax, so its row renormalises over the keys it
keeps (:meth:`~model.options.AttentionOptions.knocked_mask`, applied by both backends to the mask the
model itself built: causality, sliding windows). The predictions after, and the log-probability of
one token at one position before and after. A knockout that leaves a row without a key is refused
(:class:`~model.options.NoKeyLeft`), never a row of NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..backends import Backend
from ..options import AttentionOptions
from ..precision import exact_fp32
from .lens import Unsupported

Edge = tuple[int, int | None, int, int, int, int]  # layer, head (None: every head), q0, q1, k0, k1 (half-open)


@dataclass
class Knockout:
    position: int
    token_id: int
    logprob_before: float  # log p(token_id) after position, nothing knocked out
    logprob_after: float  # the same with the edges knocked out
    hidden: torch.Tensor  # (T, C) what the LM head reads, with the edges knocked out


@torch.inference_mode()
@exact_fp32()
def knockout(
    backend: Backend, ids: list[int], edges: list[Edge], position: int, token_id: int | None = None
) -> Knockout:
    """The text run as the model runs it and with ``edges`` knocked out; ``token_id`` None: the top guess before."""
    if backend.facts.differential:
        raise Unsupported("differential attention: a head is a pair of softmaxes over one mask; knockout is not split")
    before = backend.hidden(ids, AttentionOptions(), None)  # (T, C)
    logits = backend.head(before[position : position + 1])[0].double()  # (V,)
    if token_id is None:
        token_id = int(logits.argmax())
    after = backend.hidden(ids, AttentionOptions(knockout=tuple(edges)), None)  # (T, C)
    knocked = backend.head(after[position : position + 1])[0].double()
    return Knockout(
        position=position,
        token_id=int(token_id),
        logprob_before=float(torch.log_softmax(logits, -1)[token_id]),
        logprob_after=float(torch.log_softmax(knocked, -1)[token_id]),
        hidden=after,
    )
