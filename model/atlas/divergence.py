"""The atlas's ``divergence``: a second model on the same batches, each query row's pattern in it against
the same row in the atlas's model (``attnscope atlas ... --compare-model NAME``).

A batch runs through the atlas's model with a :class:`KeepingSink` (an :class:`~.stats.AtlasSink`
that also keeps each layer's ``steps`` function, which holds the layer's ``q``, ``k`` and ``v``:
what a KV cache holds), then through the second model with a :class:`DivergenceSink`: for each
block of the second model's rows it asks the first model's steps for the same rows and reduces the
Jensen–Shannon divergence of each pair of rows, in bits (:func:`model.compare.js_bits`: exactly 0
where the two rows are equal, at most 1), like every other metric: sums, squares, a histogram and the
top rows, which become the exemplars (the texts where the two models disagree most). Row 0 of a
window sees only itself in both models and is left out, as for every metric. The two tallies are
joined (:func:`join`) into the batch's one tally, ``divergence`` after the pattern's own metrics.
"""

from __future__ import annotations

import numpy as np
import torch

from ..compare import js_bits
from .corpus import token_stream
from .metrics import Tally
from .stats import AtlasSink

DIVERGENCE = "divergence"
# what meta.json says of it, ``{compare}`` the compare model's name
DEFINITION = (
    "Jensen–Shannon divergence, in bits, of the query row's pattern in this model (p) and in {compare} (q) on the "
    "same tokens: ½ Σ_j p_j log₂(p_j / m_j) + ½ Σ_j q_j log₂(q_j / m_j), m = (p + q) / 2; 0 where the rows are "
    "equal, at most 1"
)


class ModelMismatch(ValueError):
    """A second model that cannot be compared with the first: one line saying how they differ."""


CHECKED_TOKENS = 100_000  # the corpus's tokens both tokenizers read before the atlas starts


def check_same(lm, other, corpus, max_tokens: int | None = None) -> None:
    """The two models have the same attention layers and heads per layer and read ``corpus``'s
    documents (a :class:`~.corpus.Corpus`) as the same token ids, over the first ``max_tokens`` of
    them and at most :data:`CHECKED_TOKENS` (a different tokenizer shows within a few tokens, and a
    whole corpus read twice would delay the start); else :class:`ModelMismatch` saying the first
    difference."""
    max_tokens = CHECKED_TOKENS if max_tokens is None else min(max_tokens, CHECKED_TOKENS)
    fa, fb = lm.facts, other.facts
    for what, x, y in (
        ("attention layers", list(fa.attention_layers), list(fb.attention_layers)),
        ("heads per layer", fa.n_head, fb.n_head),
    ):
        if x != y:
            raise ModelMismatch(
                f"the compare model has {what} {y} and the atlas's model {x}; heads are compared one to one"
            )
    seen = 0
    streams = token_stream(corpus.documents(), lm.tokenizer), token_stream(corpus.documents(), other.tokenizer)
    for n, (a, b) in enumerate(zip(*streams)):
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            raise ModelMismatch(
                f"the compare model's tokenizer reads the corpus as other token ids (document {n + 1}, token {at}: "
                f"{a[at] if at < len(a) else 'none'} in the atlas's model, {b[at] if at < len(b) else 'none'} in the "
                "compare model); the two models must read the same tokens"
            )
        seen += len(a)
        if seen >= max_tokens:
            return


class KeepingSink(AtlasSink):
    """The atlas's sink for the first model, keeping each attention layer's ``steps`` besides."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps: dict = {}

    def keep_steps(self, layer: int, steps) -> None:
        self.steps[layer] = steps


class DivergenceSink(AtlasSink):
    """The second model's sink: each block of its rows against the same rows of the first model
    (``steps``: :attr:`KeepingSink.steps`), one metric, ``divergence``."""

    metrics = (DIVERGENCE,)

    def __init__(self, steps: dict, n_head: int, exemplars: int = 8, shown: np.ndarray | None = None):
        super().__init__(n_head, 1, exemplars, shown)
        self.steps_a = steps
        self.first = (1,)  # row 0 sees only itself in both models

    def _values(self, q0: int, q1: int, steps: dict) -> torch.Tensor:
        pb = steps["pattern"]  # (B, nh, t, s)
        pa = self.steps_a[self._layer.layer](q0, q1, pb.shape[-1])["pattern"].to(pb.device)
        return js_bits(pa.float(), pb.float())[None]  # (1, B, nh, t)


def join(own: Tally, divergence: Tally) -> Tally:
    """One batch's tallies of the two sinks as one, ``divergence``'s metric after the others."""
    out = Tally.empty(own.layers, own.n_head, own.k, (*own.metrics, *divergence.metrics))
    for name in own.arrays[1:]:  # every array but has_sink has the metric on its second axis
        setattr(out, name, np.concatenate([getattr(own, name), getattr(divergence, name)], axis=1))
    out.has_sink, out.tokens, out.windows, out.batches = own.has_sink, own.tokens, own.windows, own.batches
    return out
