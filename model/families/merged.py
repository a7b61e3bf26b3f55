"""T5Gemma 2's merged attention: one softmax over the decoder's own keys and the encoder's together.

Each decoder layer of T5Gemma 2 has one attention module (``T5Gemma2MergedAttention``) in place of a
self-attention and a cross-attention: its queries are the target's, its keys and values are the
target's own followed by the source's (projected by the same ``k_proj`` / ``v_proj``), and its mask is
the decoder's causal one beside an all-visible block over the source. transformers calls our attention
function once per layer with the keys concatenated, ``[target keys | source keys]``, and each row is
one softmax over both.

attnscope shows that row as two key blocks, each exact: the ``decoder`` stack's layer is the target
block of the row, the ``cross`` stack's layer the source block of the same row (transformers' eager
returns these two blocks as ``decoder_attentions`` and ``cross_attentions``). The two parts of one row
add up to 1 together, not each; ``/api/model`` ``stacks`` says so (``merged_softmax``). What a part's
layer records besides the weights is that block's: its keys, values, raw and scaled scores, its mask;
``z`` is the layer's output, over both blocks. The what-ifs of either stack act on the one softmax:
a divisor scales both blocks, a switched-off head is switched off in both, a knocked-out edge is an
edge of the block looked at.

How many keys are the source's is not in the call: a forward pre-hook on each merged module
(:func:`watch`) leaves the length of its ``encoder_hidden_states`` with the running recording.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.nn import functional as F

from ..stats import PART
from ..trace import needs_unscaled, sees_later, traced_attention, wants
from . import eager_steps

MERGED = ("T5Gemma2MergedAttention",)  # attention modules whose keys are [the decoder's | the encoder's]
BLOCKS = ("decoder", "cross")  # the stacks a merged row is shown in, in the order of its key blocks


def is_merged(module: torch.nn.Module) -> bool:
    """Whether ``module`` computes one softmax over the decoder's keys and the encoder's."""
    return type(module).__name__ in MERGED


def watch(model: torch.nn.Module, keep) -> int:
    """A pre-hook on each merged module calling ``keep(module, n)`` with ``n`` the source's length (its
    ``encoder_hidden_states``' positions) before each call. Returns how many modules are merged."""

    def hook(module, args, kwargs):
        enc = kwargs.get("encoder_hidden_states")
        if enc is not None:
            keep(module, int(enc.shape[1]))

    found = [m for m in model.modules() if is_merged(m)]
    for m in found:
        m.register_forward_pre_hook(hook, with_kwargs=True)
    return len(found)


def blocks(S: int, n_source: int) -> dict[str, slice]:
    """Each stack's keys in a merged row of ``S`` keys, the last ``n_source`` the source's."""
    return {"decoder": slice(0, S - n_source), "cross": slice(S - n_source, S)}


def knocked(opts, layer: int, mask: torch.Tensor, block: slice | None, nh: int) -> torch.Tensor:
    """``opts``' knocked-out edges (in the keys of the block looked at) on the merged ``mask`` (T, S): a row
    is left without keys only where both blocks lose every key."""
    if block is None or not opts.knockout:
        return mask
    at, end = block.start, block.stop  # an edge's keys, shifted into the block and kept inside it
    edges = tuple((e[0], e[1], e[2], e[3], min(e[4] + at, end), min(e[5] + at, end)) for e in opts.knockout)
    return dataclasses.replace(opts, knockout=edges).knocked_mask(layer, mask, nh)


def part(steps, S: int, block: slice):
    """``steps`` of a merged row narrowed to one key block: each row is computed over all ``S`` keys (one
    softmax) and every tensor along the keys kept at ``block``; ``z`` stays the whole row's."""

    def narrowed(q0: int, q1: int, s: int) -> dict:
        st = steps(q0, q1, S)
        return {
            name: t[..., block][..., :s] if name != "z" and t is not None and t.dim() == 4 else t
            for name, t in st.items()
        }

    return narrowed


def attend(rec, module, query, k, v, mask, opts, layer, f, scale: dict, own: bool) -> torch.Tensor:
    """One merged call: z ``(B, nh, T, hs)``, each block recorded into the sink of its stack (``rec``'s own
    stack's sink, or another's in ``rec.others``) that wants this layer; ``own``: whether the stack looked at
    is one of the two (the what-ifs ``opts`` are then its)."""
    B, nh, T, _ = query.shape
    S = k.shape[2]
    n_source = rec.cross_keys.pop(id(module), None)
    if n_source is None or not 0 < n_source < S:
        raise RuntimeError(f"{type(module).__name__}: the source's length was not seen before the call")
    where = blocks(S, n_source)
    edited = knocked(opts, layer, mask, where.get(rec.stack) if own else None, nh)  # (T, S) or (nh, T, S)
    sinks = {name: rec.sink if name == rec.stack else rec.others.get(name) for name in BLOCKS}
    sinks = {name: s for name, s in sinks.items() if wants(s, layer)}
    if own and not sinks and not f.eager_only:  # nothing kept: the fused kernel, as any other layer
        return F.scaled_dot_product_attention(query, k, v, attn_mask=edited, scale=1.0 / scale["divisor_value"])
    unscaled = any(needs_unscaled(s) for s in sinks.values())
    steps = eager_steps(query, k, v, edited, f, scale["scaling"], scale["divisor"], unscaled=unscaled)
    if not sinks:
        return steps(0, T, S)["z"]
    z = None
    for name, sink in sinks.items():
        b = where[name]
        causal = opts.causal and not sees_later(mask[:, b])
        window = getattr(module, "sliding_window", None) if name == "decoder" and opts.causal else None
        z = traced_attention(
            sink, layer, query, k[:, :, b], v[:, :, b], mask[:, b], scale["divisor_value"], part(steps, S, b),
            causal, None, window, extras=f.extras | {PART},
        )
    return z
