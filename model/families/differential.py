"""Differential attention (DiffLlama, Ye et al. 2024): a head is a pair of softmaxes.

A differential layer of ``2H`` query heads computes, for each pair ``h`` (query heads ``h`` and
``h + H``), ``softmax₁ − λ · softmax₂`` over the same keys, where ``λ`` is a learned number of
the layer (``exp(λq₁·λk₁) − exp(λq₂·λk₂) + λ_init``). transformers' DiffLlama calls the
attention function twice per layer with the same queries and keys and the two halves of the
values, and combines the outputs after it (then a group norm). attnscope records the first call
only, as ``H`` heads:

* ``pattern``: the signed map ``softmax₁ − λ · softmax₂`` (its rows sum to ``1 − λ``, cells can
  be negative); ``pattern_parts``: the two softmaxes, each exactly transformers' weights of one
  query head;
* ``q``, ``k``, ``v``, ``attn_scores_raw``, ``attn_scores``, ``pattern_unscaled`` and the
  statistics: those of the pair's first softmax (query head ``h``);
* the second call runs the fused kernel, unrecorded. Switching pair ``h`` off switches both of its
  query heads off in both calls, so the pair writes exactly zero, as a switched-off head does.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..fields import fields_of
from ..options import AttentionOptions

FIELDS = fields_of("differential")  # the steps it adds: its rows of the field table


def is_differential(module: torch.nn.Module) -> bool:
    """Whether an attention module combines two softmaxes with a learned λ (DiffLlama)."""
    return all(hasattr(module, name) for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2", "lambda_init"))


def differential_lambda(module: torch.nn.Module) -> float:
    """The layer's λ, computed as the model computes it: float32 sums, each exponential then in the
    model's dtype (bf16 in a bf16 model), as DiffLlamaAttention does."""
    dtype = module.lambda_q1.dtype
    with torch.no_grad():
        lambda_1 = torch.exp(torch.sum(module.lambda_q1 * module.lambda_k1, dim=-1, dtype=torch.float32)).to(dtype)
        lambda_2 = torch.exp(torch.sum(module.lambda_q2 * module.lambda_k2, dim=-1, dtype=torch.float32)).to(dtype)
        return float(lambda_1 - lambda_2 + module.lambda_init)


def pair_options(opts: AttentionOptions, H: int) -> AttentionOptions:
    """``opts`` with each switched-off pair ``h`` as its two query heads ``h`` and ``h + H``."""
    if not opts.ablate and not opts.ablate_rows:
        return opts
    if opts.ablate_values is not None:
        raise ValueError(
            "mean-ablation is not defined for differential attention (a pair's output is normalised after "
            "its two softmaxes are combined): use mode 'zero'"
        )

    def both(heads: frozenset[tuple[int, int]]) -> frozenset[tuple[int, int]]:
        return frozenset({(layer, h) for layer, h in heads} | {(layer, h + H) for layer, h in heads})

    rows = None if opts.ablate_rows is None else tuple(both(row) for row in opts.ablate_rows)
    return replace(opts, ablate=both(opts.ablate), ablate_rows=rows)


def pair_steps(steps, H: int, lam: float):
    """A ``steps`` function of ``2H`` softmax heads -> one of ``H`` pairs (``z`` stays the model's, all heads)."""

    def pairs(q0: int, q1: int, s: int) -> dict[str, torch.Tensor | None]:
        st = steps(q0, q1, s)
        first, second = st["pattern"][:, :H], st["pattern"][:, H:]  # (B, H, t, s) each
        out = {name: t if t is None or name == "z" else t[:, :H] for name, t in st.items()}
        out["pattern"] = first - lam * second  # (B, H, t, s) signed
        out["pattern_parts"] = torch.stack([first, second], dim=2)  # (B, H, 2, t, s)
        return out

    return pairs


def recorded(module: torch.nn.Module, steps, query: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """What the trace sink gets from a differential layer's first call: the pairs' ``steps``, the
    tensors of each pair's first query head ``(query, k, v)`` (``z`` stays every head's), and how
    many (B, ·, t, s) matrices of a head's size a block holds (every query head's steps, the pairs'
    two parts and the signed map)."""
    H = query.shape[1] // 2
    return pair_steps(steps, H, differential_lambda(module)), (query[:, :H], k[:, :H], v[:, :H]), 5 * H
