"""Fitting the Jacobian lens: the average Jacobian of the last block's output with respect to each block's.

For one prompt of T tokens, valid positions ``t >= skip_first``, ``h_l`` the output of block ``l`` and
``h_final`` the last block's output before the final norm::

    J_l(prompt) = mean over valid t of  Σ_{valid t' >= t} ∂h_final[t'] / ∂h_l[t]          # (d, d)

and ``J_l`` is the mean of that over prompts. Causal attention makes ``∂h_final[t'] / ∂h_l[t]`` zero
for ``t' < t``, so the inner sum runs over every valid ``t'``: one backward pass from
``Σ_{valid t'} h_final[t', i]`` gives row ``i`` of every layer's Jacobian at every position at once.
The prompt is run once as a batch of ``dim_batch`` copies, and each backward pass seeds a different
output dimension in each copy: ceil(d / dim_batch) backward passes a prompt, through one graph.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch

from ..backends import OursBackend
from ..causal.lens import blocks_and_norm
from ..options import AttentionOptions
from ..precision import exact_fp32


@dataclass
class JacobianSum:
    """What the prompts so far add up to: each source layer's Σ over prompts of J_l(prompt), float64."""

    source_layers: list[int]
    d_model: int
    n_prompts: int = 0
    total: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (d, d) float64 on the CPU

    def add(self, per_prompt: dict[int, torch.Tensor]) -> None:
        """One prompt's J_l, added in place."""
        for layer, j in per_prompt.items():
            j = j.detach().to("cpu", torch.float64)
            if layer in self.total:
                self.total[layer].add_(j)
            else:
                self.total[layer] = j.clone()
        self.n_prompts += 1

    def merge(self, other: JacobianSum) -> None:
        """Another shard's sums (a Ray worker's): the mean then weighs each shard by its prompts. The new
        sums are made before any is kept, so an interrupt leaves the sums and the count agreeing."""
        merged = {layer: self.total[layer] + j if layer in self.total else j.clone()
                  for layer, j in other.total.items()}
        self.total.update(merged)
        self.n_prompts += other.n_prompts

    def mean(self) -> dict[int, torch.Tensor]:
        if not self.n_prompts:
            raise ValueError("no prompt had a position at or after --skip-first: nothing was fitted")
        return {layer: self.total[layer] / self.n_prompts for layer in self.source_layers}


def block_outputs_with_grad(backend, idx: torch.Tensor) -> list[torch.Tensor]:
    """Token ids ``(B, T)`` -> each block's output ``L × (B, T, C)``, in one graph that starts at the
    first block's input (the embeddings are cut off: no gradient is ever asked of them)."""
    blocks, _ = blocks_and_norm(backend)
    outs: list[torch.Tensor] = []

    def entering(module, args, kwargs):
        if args:
            return (args[0].detach().requires_grad_(True), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": kwargs["hidden_states"].detach().requires_grad_(True)}

    def after(module, args, out):
        outs.append(out[0] if isinstance(out, tuple) else out)

    handles = [blocks[0].register_forward_pre_hook(entering, with_kwargs=True)]
    handles += [block.register_forward_hook(after) for block in blocks]
    try:
        with torch.enable_grad():
            if isinstance(backend, OursBackend):
                backend.model.hidden_states(idx, opts=AttentionOptions())
            else:
                backend.trunk(input_ids=idx, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return outs


@exact_fp32()
def prompt_jacobians(
    backend, ids: list[int], layers: list[int], skip_first: int, dim_batch: int
) -> dict[int, torch.Tensor]:
    """J_l(prompt) ``(d, d)`` float64 for each of ``layers`` (blocks before the last), this prompt alone."""
    T = len(ids)
    if T <= skip_first:
        raise ValueError(f"a prompt of {T} tokens has no position at or after skip_first={skip_first}")
    d = backend.facts.d_model
    nb = min(dim_batch, d)
    idx = torch.tensor([ids], dtype=torch.long, device=backend.device).expand(nb, T)  # (nb, T)
    outs = block_outputs_with_grad(backend, idx)
    final = outs[-1]  # (nb, T, C) the last block's output, before the final norm
    sources = [outs[layer] for layer in layers]
    n_valid = T - skip_first
    J = {layer: torch.zeros(d, d, dtype=torch.float64) for layer in layers}  # on the CPU (MPS has no float64)
    rows = torch.arange(nb, device=backend.device)
    for start in range(0, d, nb):
        width = min(nb, d - start)
        seed = torch.zeros_like(final)  # (nb, T, C): copy b asks for output dimension start + b, at every valid t'
        seed[rows[:width], skip_first:, start + rows[:width]] = 1
        grads = torch.autograd.grad(final, sources, seed, retain_graph=start + nb < d)
        for layer, g in zip(layers, grads):  # g (nb, T, C): ∂ Σ_{valid t'} h_final[t', i] / ∂ h_l[t, j]
            J[layer][start : start + width] = g[:width, skip_first:].float().sum(1).to("cpu", torch.float64) / n_valid
    return J


def prompts(token_lists: Iterable[list[int]], seq_len: int, skip_first: int) -> Iterator[list[int]]:
    """Each document's tokens cut to ``seq_len``; documents with no position at or after ``skip_first`` left out."""
    for ids in token_lists:
        ids = ids[:seq_len]
        if len(ids) > skip_first:
            yield ids


def check_settings(facts, seq_len: int, skip_first: int, dim_batch: int, layers: list[int] | None) -> list[int]:
    """The source layers (blocks before the last), after checking every setting; ValueError names the bad one."""
    if skip_first < 0:
        raise ValueError(f"--skip-first {skip_first}: must be 0 or more")
    if seq_len <= skip_first:
        raise ValueError(f"--seq-len {seq_len} must be larger than --skip-first {skip_first}")
    if seq_len > facts.block_size:
        raise ValueError(f"--seq-len {seq_len}: the model reads at most {facts.block_size} tokens")
    if dim_batch < 1:
        raise ValueError(f"--dim-batch {dim_batch}: must be at least 1")
    last = facts.n_layer - 1
    chosen = list(range(last)) if layers is None else sorted(set(layers))
    bad = [layer for layer in chosen if not 0 <= layer < last]
    if bad:
        raise ValueError(f"--layers {bad[0]}: the source layers are the blocks before the last, 0 to {last - 1}")
    return chosen


def backward_passes(d_model: int, dim_batch: int) -> int:
    return math.ceil(d_model / min(dim_batch, d_model))
