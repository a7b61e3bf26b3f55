"""How every attention layer of a forward pass runs: the what-ifs and the switched-off heads.

:class:`AttentionOptions` is passed down a forward pass (our GPT's and any transformers
family's alike) and read by every attention layer, so a what-if (no causal mask, another
divisor) or an ablation changes no module state. :func:`ablate_heads` is where a layer
applies the switched-off heads: to each head's output, right before the output projection.
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
    # per layer (nh, hs): what an ablated head's output becomes instead of zeros (mean-ablation)
    ablate_values: tuple[torch.Tensor, ...] | None = None

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


def ablate_heads(z: torch.Tensor, layer: int, opts: AttentionOptions) -> torch.Tensor:
    """Each head's output ``z`` (B, nh, T, hs) with the switched-off heads replaced: zeros, or
    the mean output ``opts.ablate_values[layer]`` (nh, hs) given. Called right before the output
    projection, so every later layer and the predictions see the change."""
    B, nh = z.shape[0], z.shape[1]
    off = opts.switched_off(layer, B, nh, z.device)  # (B, nh, 1, 1)
    if off is None:
        return z
    if opts.ablate_values is None:
        return z.masked_fill(off, 0.0)
    replacement = opts.ablate_values[layer].to(z.dtype)[None, :, None, :]  # (1, nh, 1, hs)
    return torch.where(off, replacement, z)  # (B, nh, T, hs)
