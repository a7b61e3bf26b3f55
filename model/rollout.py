"""Attention rollout (Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers").

One layer's attention says where each token looked among the layer's *inputs*; after a few
layers those inputs are already mixtures of tokens. Rollout follows the mixing down to the
input tokens: with ``Â_l`` layer l's attention averaged over its heads, the rollout after layer
l is ``R_l = Â_l · R_{l-1}`` (``R_0 = I``), and row ``p`` of ``R_l`` is how much token p's
representation after layer l draws on each input token.

With ``residual=True`` (the paper's choice) each layer's map is ``0.5 · Â_l + 0.5 · I`` with
its rows normalised to sum to 1: the residual stream carries every token's own representation
past the attention. Without it, ``Â_l`` as it is. Heads switched off (``ablate``) write nothing,
so they are left out of the mean; a layer with every head off mixes nothing (``Â_l = I``).

:class:`RolloutSink` computes it inside one forward pass, a block of query rows at a time (it is
a *blockwise* sink, :func:`model.trace.traced_attention`), keeping one T×T layer map and the
running product: no (heads, T, T) tensor is kept. Layers without softmax attention (a hybrid's
linear or convolution layers) never reach it: the rollout runs over the attention layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .blocks import block_budget, query_blocks

BLOCK_BUDGET_BYTES = 64 << 20  # the (nh, t, S) temporaries of one block of query rows


@dataclass
class RolloutSink:
    """A blockwise trace sink: the rollout row of query ``position`` after every attention layer."""

    T: int
    position: int
    residual: bool = True
    off: frozenset = frozenset()  # (layer, head) switched off: left out of their layer's mean
    layers: list[int] = field(default_factory=list)  # the model's numbers of the layers seen, in order
    rows: list[torch.Tensor] = field(default_factory=list)  # per layer: (T,) row ``position`` of R_l
    blockwise = True
    needs_unscaled = False

    def __post_init__(self) -> None:
        self._R: torch.Tensor | None = None  # (T, T) the rollout so far
        self._A: torch.Tensor | None = None  # (T, S) this layer's head-mean attention

    def wants(self, layer: int) -> bool:
        return True

    def blocks(self, T: int, S: int, nh: int) -> list[tuple[int, int]]:
        """Called after :meth:`begin`: blocks sized for the layer's device (:func:`model.blocks.block_budget`)."""
        return query_blocks(T, S, nh, block_budget(self._A.device, BLOCK_BUDGET_BYTES), temporaries=4)

    def begin(self, layer, q, k, v, mask, divisor, softcap=None, window=None, sink_logit=None, extras=frozenset()):
        T, S = mask.shape
        self._A = torch.zeros(T, S, dtype=torch.float64, device=q.device)
        self._on = [h for h in range(q.shape[1]) if (layer, h) not in self.off]  # the heads that write
        self.layers.append(layer)

    def block(self, q0: int, q1: int, steps: dict) -> None:
        pattern = steps["pattern"][0]  # (nh, t, s)
        if self._on:  # the mean of the heads that write, as the paper averages them
            self._A[q0:q1, : pattern.shape[-1]] = pattern[self._on].double().mean(0)

    def end(self, z: torch.Tensor) -> None:
        A = self._A  # (T, T)
        if not self._on:  # every head switched off: the layer mixes nothing
            A = torch.eye(A.shape[0], dtype=A.dtype, device=A.device)
        if self.residual:
            A = 0.5 * A + 0.5 * torch.eye(A.shape[0], dtype=A.dtype, device=A.device)
            A = A / A.sum(-1, keepdim=True)
        self._R = A if self._R is None else A @ self._R  # R_l = Â_l · R_{l-1}
        self.rows.append(self._R[self.position].float().cpu())
        self._A = None


def rollout_rows(backend, ids: list[int], position: int, residual: bool, opts) -> tuple[list[int], torch.Tensor]:
    """One forward pass of ``ids`` (the what-ifs of ``opts`` applied): the attention layers' numbers
    and ``(L, T)``, row ``position`` of the rollout after each of them."""
    sink = RolloutSink(T=len(ids), position=position, residual=residual, off=opts.ablate)
    with torch.inference_mode():
        backend.run(ids, opts, sink, logits=False)
    return sink.layers, torch.stack(sink.rows)
