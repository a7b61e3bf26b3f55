"""Switching heads off, over any backend (ours or transformers).

* :func:`head_effects`: for one position and one target token, the change in log-probability
  when each head alone is switched off. Every head is a row of a batch, so all heads cost a few
  batched forward passes, not one pass per head; since attention is causal, only the tokens up to
  that position are run (an image-bound backend runs its whole prompt, and tells that length,
  ``run_length``, to size the batches by); and with our GPT, the rows of a layer-l head start from the residual
  stream entering layer l (the layers before it are the same in every row).
* :func:`generate`: new tokens one at a time with a key/value cache (each step feeds only the
  newest token), greedy or sampled with a seed, recording where each step's query looked.

An ablated head's output (its pattern applied to v) is replaced before the layer's output
projection (:func:`model.options.ablate_heads`): by zeros, or by its mean output over the text
(mean-ablation, the means taken from a run without the ablation under study).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch

from .backends import Backend, ResumableBackend
from .options import AttentionOptions
from .trace import AttentionTrace

ROWS_BUDGET_BYTES = 256 << 20  # activations of one batch of head-effect rows, roughly


class MeanOutputs(dict):
    """A trace sink keeping each attention layer's per-head output averaged over the tokens, ``(nh, hs)``,
    by the layer's number (a hybrid's attention layers are not numbered 0, 1, 2, ...)."""

    needs_unscaled = False

    def append(self, trace: AttentionTrace) -> None:
        self[trace.layer] = trace.z[0].mean(dim=1).float()  # (nh, T, hs) -> (nh, hs)


def mean_outputs(backend: Backend, ids: list[int], opts: AttentionOptions) -> tuple[torch.Tensor | None, ...]:
    """Per layer, by its number, each head's mean output over the text ``(nh, hs)``: what mean-ablation
    puts in its place (:func:`model.options.ablate_heads` reads it by layer number); ``None`` for a layer
    without softmax attention."""
    sink = MeanOutputs()
    backend.run(ids, opts, sink, logits=False)
    return tuple(sink.get(layer) for layer in range(backend.facts.n_layer))


@dataclass
class HeadEffects:
    position: int
    token_id: int
    logprob: float  # log p(token_id) after position, nothing ablated
    # (L, nh) float64, a row per attention layer: log-prob with head (l, h) alone ablated, minus logprob
    delta: torch.Tensor
    # a hybrid's implicit layers (zero ablation): layer -> (heads,) the same, its head's slice of the scan's output 0
    implicit: dict[int, torch.Tensor] = field(default_factory=dict)


def rows_per_batch(T: int, n_head: int, d_model: int) -> int:
    """How many rows of T tokens one batch holds within :data:`ROWS_BUDGET_BYTES` (float32 scores
    of every head and a few (T, C) activations per row)."""
    per_row = 4 * T * (2 * n_head * T + 16 * d_model)
    return max(1, ROWS_BUDGET_BYTES // per_row)


def resumes(backend: Backend) -> bool:
    """Whether rows (a head switched off, a piece patched in) start at their own block: ours on a CPU, where
    the layers before a row's are arithmetic saved. On a GPU a short text's pass waits on its kernel launches,
    not on its arithmetic, so rows of every layer share whole passes there (GPT-2 small's 144 heads at 32
    tokens: one pass of 144 rows against twelve of twelve, one from each layer)."""
    device = getattr(backend, "device", None)
    return isinstance(backend, ResumableBackend) and isinstance(device, torch.device) and device.type == "cpu"


def head_effects(
    backend: Backend,
    ids: list[int],
    position: int,
    token_id: int | None = None,
    mode: str = "zero",
    base: AttentionOptions = AttentionOptions(),
) -> HeadEffects:
    """Switch each head off alone and measure ``log p(token_id)`` after ``position``.

    ``token_id`` None: the model's top prediction there. ``mode`` "zero" or "mean".
    ``base`` holds the what-ifs every row shares (heads already switched off, ...).
    """
    facts = backend.facts
    prefix = ids[: position + 1]  # causal: later tokens cannot change this prediction
    values = mean_outputs(backend, ids, base) if mode == "mean" else None
    base = replace(base, ablate_values=values)
    idx = torch.tensor([prefix], dtype=torch.long)  # (1, T)
    clean = backend.last_logits(idx, base)[0]  # (V,)
    if token_id is None:
        token_id = int(clean.argmax())
    logprob = float(torch.log_softmax(clean.double(), dim=-1)[token_id])
    # the tokens a pass runs: the prefix, or the whole prompt where a backend runs it whole (an image's)
    per = rows_per_batch(getattr(backend, "run_length", len)(prefix), facts.n_head, facts.d_model)
    starts = backend.block_inputs(idx, base) if resumes(backend) else None
    # one row per attention layer (a hybrid's other layers have no heads), in the order of facts.attention_layers
    delta = torch.zeros(len(facts.attention_layers), facts.n_head, dtype=torch.float64)
    row_of = {layer: i for i, layer in enumerate(facts.attention_layers)}
    if starts is not None:
        # a head of layer l changes nothing before it: its rows start from the residual stream entering l
        for layer in facts.attention_layers:
            for h0 in range(0, facts.n_head, per):
                heads = range(h0, min(facts.n_head, h0 + per))
                opts = replace(base, ablate_rows=tuple(frozenset({(layer, h)}) for h in heads))
                x = starts[layer].expand(len(heads), -1, -1)  # (n, T, C)
                logits = backend.last_logits_from(layer, x, opts)  # (n, V)
                delta[row_of[layer], h0 : h0 + len(heads)] = torch.log_softmax(logits.double(), dim=-1)[
                    :, token_id
                ].cpu()
    else:
        # every row a whole pass: a batch of rows, row i switching off head i
        heads = [(layer, h) for layer in facts.attention_layers for h in range(facts.n_head)]
        for start in range(0, len(heads), per):
            chunk = heads[start : start + per]
            opts = replace(base, ablate_rows=tuple(frozenset({lh}) for lh in chunk))
            logits = backend.last_logits(idx.expand(len(chunk), -1), opts)  # (n, V)
            lp = torch.log_softmax(logits.double(), dim=-1)[:, token_id].cpu()
            for (layer, h), value in zip(chunk, lp):
                delta[row_of[layer], h] = value
    implicit = _implicit_effects(backend, idx, base, token_id, per) if mode == "zero" else {}
    return HeadEffects(
        position=position,
        token_id=int(token_id),
        logprob=logprob,
        delta=delta - logprob,
        implicit={layer: values - logprob for layer, values in implicit.items()},
    )


SWITCHABLE = ("gated_deltanet", "kimi_delta", "mamba2", "lightning")  # one slice of the scan's output per head


def _implicit_effects(backend, idx, base: AttentionOptions, token_id: int, per: int) -> dict[int, torch.Tensor]:
    """log p(token_id) with each implicit head alone switched off (model.families.implicit), whole passes."""
    out = {}
    for layer, about in enumerate(backend.facts.layers):
        if not about.get("implicit") or about["type"] not in SWITCHABLE:
            continue
        values = torch.zeros(about["heads"], dtype=torch.float64)
        for h0 in range(0, about["heads"], per):
            heads = range(h0, min(about["heads"], h0 + per))
            opts = replace(base, ablate_rows=tuple(frozenset({(layer, h)}) for h in heads))
            logits = backend.last_logits(idx.expand(len(heads), -1), opts)  # (n, V)
            values[h0 : h0 + len(heads)] = torch.log_softmax(logits.double(), dim=-1)[:, token_id].cpu()
        out[layer] = values
    return out


# ------------------------------------------------------------------ generation


@dataclass
class Step:
    """One generated token."""

    step: int  # 1, 2, ...
    token_id: int
    prob: float  # its probability under softmax(logits / temperature)
    top_ids: list[int]
    top_probs: list[float]
    attention: torch.Tensor  # (L, nh, S): the row of the query that predicted it, over every earlier token


@dataclass
class Done:
    ids: list[int]  # prompt and generated tokens
    generated: list[int]
    reason: str  # "length" | "eos" | "context"


def eos_ids(backend: Backend) -> set[int]:
    """The tokens that end a generation: the model's EOS (ours: ``<|endoftext|>``)."""
    model = backend.model
    found = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if found is None:
        found = getattr(model.config, "eos_token_id", None)
    if found is None:
        found = getattr(backend.tokenizer, "eot_id", None)
    if found is None:
        return set()
    return {int(i) for i in (found if isinstance(found, (list, tuple)) else [found])}


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Which tokens top-p sampling keeps (a bool mask like ``probs``): the likeliest ones whose
    probabilities, added from the top, first reach ``top_p``, and always the likeliest one."""
    order = torch.argsort(probs, descending=True)
    sorted_probs = probs[order]
    before = torch.cumsum(sorted_probs, 0) - sorted_probs  # mass of the tokens likelier than each
    keep_sorted = before < top_p
    keep_sorted[0] = True
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep[order] = keep_sorted
    return keep


def generate(
    backend: Backend,
    ids: list[int],
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    opts: AttentionOptions = AttentionOptions(),
    top_n: int = 5,
    top_p: float | None = None,
) -> Iterator[Step | Done]:
    """Yields a :class:`Step` per new token as it is produced, then one :class:`Done`.

    The first step runs the whole prompt into the cache; every later step feeds only the token
    just chosen. Greedy takes the arg-max logit (what transformers' ``generate(do_sample=False)``
    does); sampling draws from ``softmax(logits / temperature)`` over the ``top_k`` best
    (all if None), then over the nucleus of ``top_p`` (:func:`nucleus`), with a generator seeded
    by ``seed``. Stops after ``max_new_tokens``
    ("length"), on the model's EOS ("eos"), or when the text fills the context ("context").
    The caller may stop iterating at any step; nothing is left running.
    """
    block_size = backend.facts.block_size
    eos = eos_ids(backend)
    gen = torch.Generator().manual_seed(int(seed)) if do_sample else None
    seq = list(ids)
    if len(seq) >= block_size:
        yield Done(ids=seq, generated=[], reason="context")
        return
    cache = backend.start_generation()
    feed = list(ids)
    for step in range(1, max_new_tokens + 1):
        logits, rows = backend.step(feed, cache, opts)  # (V,), L × (nh, S)
        probs = torch.softmax(logits.double().cpu() / temperature, dim=-1)  # (V,)
        if do_sample:
            weights = probs
            if top_k is not None and top_k < probs.numel():
                kth = torch.topk(probs, top_k).values[-1]
                weights = torch.where(probs >= kth, probs, torch.zeros_like(probs))
            if top_p is not None and top_p < 1:
                weights = torch.where(nucleus(weights / weights.sum(), top_p), weights, torch.zeros_like(weights))
            token = int(torch.multinomial(weights, 1, generator=gen))
        else:
            token = int(logits.argmax())
        top = torch.topk(probs, min(top_n, probs.numel()))
        yield Step(
            step=step,
            token_id=token,
            prob=float(probs[token]),
            top_ids=top.indices.tolist(),
            top_probs=top.values.tolist(),
            attention=torch.stack(rows).cpu(),  # (L, nh, S)
        )
        seq.append(token)
        reason = None
        if token in eos:
            reason = "eos"
        elif step == max_new_tokens:
            reason = "length"
        elif len(seq) >= block_size:
            reason = "context"
        if reason:
            yield Done(ids=seq, generated=seq[len(ids) :], reason=reason)
            return
        feed = [token]
