"""Which attention stack an atlas measures: a decoder's or an encoder's one stack, or one of an encoder-decoder's
three (``encoder``, ``decoder``, ``cross``; default the decoder, as every per-head route).

On an encoder-decoder each window of the corpus is both the source and the target: the encoder reads the window,
and the decoder reads the same window teacher-forced (its tokens as they are, no decoder start token first), so
every stack's rows and keys are the window's tokens and every metric (the first token, the previous one, the
window of ``local_window`` tokens, induction on the probe) is read on them as on a decoder's. Nothing is
generated: a greedy target per window would cost a pass per token and measure the model's own guesses, not the
corpus. :data:`model.atlas.meta.STACK_TARGET` says so in ``meta.json``.
"""

from __future__ import annotations

import copy

import torch

from .meta import AtlasError


def stack_of(facts, stack: str | None) -> str:
    """The stack to measure: ``stack`` where the model has it (None: the decoder where there is one, else the
    model's one); :class:`AtlasError` in one line naming the model's stacks where it has not."""
    names = [s["name"] for s in facts.stacks]
    if stack is None:
        return "decoder" if "decoder" in names else names[0]
    if stack not in names:
        raise AtlasError(f"{facts.name} has no {stack} stack (it has {' and '.join(names)} attention): --stack")
    return stack


def stack_facts(facts, stack: str | None):
    """``facts`` as the atlas of ``stack`` sees the model: the stack's own layers and heads (an encoder-decoder's
    encoder may be deeper than its decoder); ``facts`` itself for a model of one stack."""
    if stack is None or len(facts.stacks) == 1:
        return facts
    about = next(s for s in facts.stacks if s["name"] == stack)
    out = copy.copy(facts)
    out.n_layer, out.n_head = about["n_layer"], about["n_head"]
    out.attention_layers = list(range(about["n_layer"]))
    out.layers = list(facts.layers[: about["n_layer"]])
    return out


def run_stack(backend, idx: torch.Tensor, stack: str) -> None:
    """``idx`` (B, T) as source and target through an encoder-decoder, ``stack``'s calls into the running
    recording (the encoder alone for the ``encoder`` stack)."""
    from ..families.attention import stacked

    with stacked(backend.places, stack):
        encoded = backend.encode(idx)
        if stack != "encoder":
            backend.decode(idx, encoded)
