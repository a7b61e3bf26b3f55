"""How every attention layer of a forward pass runs: the what-ifs and the switched-off heads.

:class:`AttentionOptions` is passed down a forward pass (our GPT's and any transformers
family's alike) and read by every attention layer, so a what-if (no causal mask, another
divisor) or an ablation changes no module state. :func:`ablate_heads` is where a layer
applies the switched-off heads: to each head's output, right before the output projection, and
:meth:`AttentionOptions.knocked_mask` where a layer knocks edges out of its mask (attention knockout).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AttentionOptions:
    """How every attention layer runs.

    ``causal=False`` removes the mask (an encoder-style what-if); ``divisor`` is the number
    the raw scores are divided by, ``None`` meaning the model's own (``sqrt(head_dim)`` for our GPT).
    ``ablate`` switches heads off: :func:`ablate_heads` replaces their output before the
    layer's output projection.
    """

    causal: bool = True
    divisor: float | None = None
    # ablation: these (layer, head) outputs are replaced before the output projection, in every batch row
    ablate: frozenset[tuple[int, int]] = frozenset()
    # per batch row, one more set of heads switched off in that row only (head effects: row i ablates head i)
    ablate_rows: tuple[frozenset[tuple[int, int]], ...] | None = None
    # per layer (nh, hs) or (nh, T, hs): what an ablated head's output becomes instead of zeros (mean-ablation;
    # activation patching: another run's output at every position)
    ablate_values: tuple[torch.Tensor, ...] | None = None
    # attention knockout: (layer, head or None for every head, q0, q1, k0, k1): the cells of queries q0..q1 - 1 and
    # keys k0..k1 - 1 leave the mask, so those scores are -inf before the softmax and each row renormalises
    knockout: tuple[tuple[int, int | None, int, int, int, int], ...] = ()

    def divisor_for(self, default: float) -> float:
        """The divisor this pass uses: the what-if's, else ``default`` (the model's own)."""
        return default if self.divisor is None else float(self.divisor)

    def switched_off(self, layer: int, B: int, nh: int, device) -> torch.Tensor | None:
        """(B, nh, 1, 1) bool, True where head h of this layer is ablated in batch row b; None if none is."""
        off = [h for (lay, h) in self.ablate if lay == layer]
        rows = self.ablate_rows
        if not off and not (rows and any(lay == layer for row in rows for (lay, _) in row)):
            return None
        mask = torch.zeros(B, nh, dtype=torch.bool)
        mask[:, off] = True
        for b, row in enumerate(rows or ()):
            mask[b, [h for (lay, h) in row if lay == layer]] = True
        return mask.to(device)[:, :, None, None]


    def knocked_mask(self, layer: int, mask: torch.Tensor, nh: int) -> torch.Tensor:
        """The layer's (T, S) mask with this pass's knocked-out edges of ``layer`` set to False: ``mask`` itself when
        the layer has none, else (nh, T, S), one per query head. :class:`NoKeyLeft` when a row keeps no key."""
        edges = [e for e in self.knockout if e[0] == layer]
        if not edges:
            return mask
        out = mask.expand(nh, *mask.shape).clone()  # (nh, T, S)
        for _, head, q0, q1, k0, k1 in edges:
            out[slice(None) if head is None else head, q0:q1, k0:k1] = False
        empty = (~out.any(dim=-1)).nonzero()  # (n, 2): head, query of rows without a key
        if len(empty):
            head, query = (int(i) for i in empty[0])
            raise NoKeyLeft(layer, head, query)
        return out


class NoKeyLeft(ValueError):
    """A knockout that leaves a query row of some head without any key to attend to."""

    def __init__(self, layer: int, head: int, query: int):
        super().__init__(
            f"the knockout leaves query {query} of layer {layer}, head {head} without any key to attend to"
        )
        self.layer, self.head, self.query = layer, head, query


def ablate_heads(z: torch.Tensor, layer: int, opts: AttentionOptions) -> torch.Tensor:
    """Each head's output ``z`` (B, nh, T, hs) with the switched-off heads replaced: zeros, or
    ``opts.ablate_values[layer]``: a mean output (nh, hs), or an output per position (nh, T, hs).
    Called right before the output projection, so every later layer and the predictions see the
    change."""
    B, nh = z.shape[0], z.shape[1]
    off = opts.switched_off(layer, B, nh, z.device)  # (B, nh, 1, 1)
    if off is None:
        return z
    if opts.ablate_values is None:
        return z.masked_fill(off, 0.0)
    values = opts.ablate_values[layer].to(z.dtype)
    replacement = values[None, :, None, :] if values.dim() == 2 else values[None]  # (1, nh, 1, hs) or (1, nh, T, hs)
    return torch.where(off, replacement, z)  # (B, nh, T, hs)
