"""One batch of the atlas: its windows through the model into an :class:`~.stats.AtlasSink`, reduced
to a :class:`~.metrics.Tally` (with a second model, its ``divergence`` too; a hybrid's implicit heads
by :mod:`.implicit`). The local engine
(:mod:`.build`) and every Ray actor (:mod:`.ray_engine`) call :func:`batch_tally`, so neither
imports the other for it."""

from __future__ import annotations

import numpy as np
import torch

from ..options import AttentionOptions
from ..precision import exact_fp32
from .corpus import Batch
from .implicit import implicit_tally, joined, shape
from .metrics import Tally
from .stacks import run_stack, stack_facts
from .stats import AtlasSink
from .text import shown_rows


def forward(backend, ids: np.ndarray, sink, stack: str | None = None) -> None:
    """One batch ``(B, T)`` of token ids through the model's explicit attention path into ``sink``
    (the LM head is skipped: the atlas needs the attention only); an encoder-decoder's ``stack`` only, the
    window its source and its target (:mod:`.stacks`)."""
    idx = torch.from_numpy(np.ascontiguousarray(ids)).to(backend.device)
    opts = AttentionOptions()
    with torch.inference_mode(), exact_fp32():
        if getattr(backend, "places", None) is not None:  # an encoder-decoder: one of its stacks
            from ..families.attention import recording

            with recording(sink, opts):
                run_stack(backend, idx, stack or "decoder")
        elif hasattr(backend, "trunk"):  # a transformers model: its layers call our attention function
            from ..families.attention import recording

            with recording(sink, opts):
                backend.trunk(input_ids=idx, **getattr(backend, "calls", {"use_cache": False}))  # an encoder: none
        else:  # our GPT
            backend.model.hidden_states(idx, opts=opts, trace=sink)


def batch_tally(backend, batch: Batch, local_window: int, exemplars: int, other=None, stack=None) -> Tally:
    """One batch's :class:`Tally` (the local engine and every Ray actor call this); with ``other`` (a
    second model's backend) its ``divergence`` from this one too (:mod:`.divergence`); ``stack``: an
    encoder-decoder's stack measured (:mod:`.stacks`)."""
    shown = shown_rows(backend.tokenizer, batch.ids) if exemplars else None
    facts = stack_facts(backend.facts, stack)
    if other is None:
        sink = AtlasSink(facts.n_head, local_window, exemplars, shown)
        forward(backend, batch.ids, sink, stack)
        own = sink.tally(batch.ids, batch.window0)
        _, implicit, heads = shape(facts)
        if not implicit:
            return own
        mixed = implicit_tally(backend, implicit, batch.ids, batch.window0, local_window, exemplars, shown)
        return joined([own, mixed], heads)
    from .divergence import DivergenceSink, KeepingSink, join

    sink = KeepingSink(facts.n_head, local_window, exemplars, shown)
    forward(backend, batch.ids, sink, stack)
    own = sink.tally(batch.ids, batch.window0)
    second = DivergenceSink(sink.steps, facts.n_head, exemplars, shown)
    forward(other, batch.ids, second, stack)
    sink.steps.clear()
    return join(own, second.tally(batch.ids, batch.window0))
