"""What each head does, as scores in [0, 1] measured on built-in probe inputs.

* ``previous_token``: mean weight a query puts on the token just before it (t-1).
* ``first_token``: mean weight on position 0, the "attention sink" (queries t >= 1).
* ``induction``: on a random token sequence repeated twice, mean weight from each token of
  the second copy to the token that followed its earlier occurrence.
* ``self``: mean weight on the diagonal (queries t >= 1).

The functions take attention patterns ``(L, nh, T, T)`` so they can score any model,
including the transformers reference (``output_attentions``) and every family of
:mod:`model.backends`. Nothing here assumes our tokenizer: each probe starts with the
model's own beginning-of-sequence token (or ``<|endoftext|>``, or nothing), and random tokens
are drawn from the model's ordinary multi-byte tokens (:func:`random_pool`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .ours.gpt import GPT
from .precision import exact_fp32
from .trace import AttentionTrace

ROLES = ("previous_token", "first_token", "induction", "self")

PROBE_SENTENCES = (
    "The cat sat on the mat because it was warm and the sun was shining through the window.",
    "Open the Settings window, choose Network, and switch the connection on or off.",
    "She told her brother that the train would leave at noon, so they packed early.",
    "A small dog ran across the park and chased the ball that the children had thrown.",
)


def previous_token_score(pattern: torch.Tensor) -> torch.Tensor:
    """pattern (..., T, T) -> (...) mean of pattern[t, t-1] over t >= 1."""
    return torch.diagonal(pattern, offset=-1, dim1=-2, dim2=-1).mean(-1)


def first_token_score(pattern: torch.Tensor) -> torch.Tensor:
    return pattern[..., 1:, 0].mean(-1)


def self_score(pattern: torch.Tensor) -> torch.Tensor:
    return torch.diagonal(pattern, dim1=-2, dim2=-1)[..., 1:].mean(-1)


def induction_score(pattern: torch.Tensor, prefix: int, n: int) -> torch.Tensor:
    """pattern (..., T, T) of ``prefix`` tokens then a random sequence of ``n`` tokens twice.

    The j-th token of the second copy sits at ``prefix + n + j``; the token after its first
    occurrence is at ``prefix + j + 1``. Scored for j = 0 .. n-2.
    """
    j = torch.arange(n - 1)
    return pattern[..., prefix + n + j, prefix + j + 1].mean(-1)


def induction_tokens(
    vocab_size: int, n: int = 40, batch: int = 4, seed: int = 0, low: int = 256, pool: torch.Tensor | None = None
) -> torch.Tensor:
    """(batch, n) random token ids, seeded: drawn from ``pool`` if given, else ids ``low .. vocab_size - 1``."""
    g = torch.Generator().manual_seed(seed)
    if pool is None:
        return torch.randint(low, vocab_size, (batch, n), generator=g)
    return pool[torch.randint(len(pool), (batch, n), generator=g)]


def random_pool(tokenizer, vocab_size: int) -> torch.Tensor | None:
    """Ids of ordinary tokens of two or more bytes (no special, byte or byte-fallback tokens),
    which a model has seen as whole pieces of text; None if the tokenizer cannot tell."""
    if not hasattr(tokenizer, "token_bytes"):
        return None
    special = getattr(tokenizer, "special_ids", set())
    n = min(vocab_size, tokenizer.vocab_size)
    ids = [i for i in range(n) if i not in special and len(tokenizer.token_bytes(i)) >= 2]
    return torch.tensor(ids) if len(ids) >= 16 else None


def probe_prefix(tokenizer) -> list[int]:
    """What every probe starts with: nothing if the tokenizer already adds the model's BOS,
    else ``<|endoftext|>`` when the vocabulary has it (GPT-2's BOS), else nothing."""
    if getattr(tokenizer, "bos_id", None) is not None:
        return []
    eot = getattr(tokenizer, "eot_id", None)
    return [eot] if eot is not None else []


def _patterns(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    trace: list[AttentionTrace] = []
    model(idx, trace=trace)
    return torch.stack([t.pattern for t in trace], dim=1)  # L × (B, nh, T, T) -> (B, L, nh, T, T)


def role_scores(
    patterns: Callable[[torch.Tensor], torch.Tensor],
    tokenizer,
    vocab_size: int,
    block_size: int,
    n_induction: int = 40,
) -> torch.Tensor:
    """(n_layer, n_head, 4) role scores of any model, given ``patterns``: token ids (B, T) ->
    attention patterns (B, L, nh, T, T). Ours and transformers' ``output_attentions`` both fit."""
    prefix = probe_prefix(tokenizer)
    n_induction = min(n_induction, (block_size - 1) // 2)
    natural = []
    for s in PROBE_SENTENCES:
        ids = (prefix + tokenizer.encode_ids(s))[:block_size]
        p = patterns(torch.tensor([ids]))[0]  # (L, nh, T, T)
        natural.append(torch.stack([previous_token_score(p), first_token_score(p), self_score(p)], -1))
    prev, first, self_ = torch.stack(natural).mean(0).unbind(-1)  # (L, nh) each

    rand = induction_tokens(vocab_size, n=n_induction, pool=random_pool(tokenizer, vocab_size))  # (B, n)
    start = prefix or tokenizer.encode_ids("")[:1]  # the BOS a tokenizer adds, if any
    bos = torch.tensor(start, dtype=torch.long).expand(rand.size(0), len(start))  # (B, 0 or 1)
    p = patterns(torch.cat([bos, rand, rand], dim=1))  # (B, L, nh, T, T)
    ind = induction_score(p, prefix=len(start), n=n_induction).mean(0)  # (L, nh)
    return torch.stack([prev, first, ind, self_], dim=-1).clamp(0, 1).cpu()


@torch.inference_mode()
@exact_fp32()
def head_role_scores(model: GPT, tokenizer, n_induction: int = 40) -> torch.Tensor:
    """(n_layer, n_head, 4) scores in [0, 1], roles in the order of :data:`ROLES`."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        return role_scores(
            lambda idx: _patterns(model, idx.to(device)).cpu(),
            tokenizer,
            model.config.vocab_size,
            model.config.block_size,
            n_induction,
        )
    finally:
        model.train(was_training)
