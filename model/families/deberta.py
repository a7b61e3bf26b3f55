"""DeBERTa-v2/v3's disentangled attention, recorded: q·kᵀ in three parts that add up.

transformers computes DeBERTa-v2's attention inside its ``DisentangledSelfAttention`` module, not
through AttentionInterface, so :func:`watch` gives each such module this module's :func:`forward`:
the same arithmetic as the module's, one named step at a time, handed to the running
:func:`~model.families.attention.recording` as every other family's layers are. A score is three
terms, each with its own query and key (``r(i, j)``: the bucketed relative position of key j from query i):

* ``attn_scores_content``: content to content, ``q_i · k_j``;
* ``attn_scores_content_position``: content to position, ``q_i · pos_k[r(i, j)]``;
* ``attn_scores_position_content``: position to content, ``k_j · pos_q[r(j, i)]``;

and ``attn_scores_raw`` is their sum. The model divides each by ``sqrt(head_dim · (1 + terms))``
(``terms``: how many position terms ``pos_att_type`` has), the layer's divisor.
"""

from __future__ import annotations

import functools

import torch

from ..fields import fields_of
from ..options import ablate_heads
from ..trace import head_major, masked_scores, needs_unscaled, traced_attention, wants
from .attention import current

FIELDS = fields_of("deberta")  # the steps it adds: its rows of the field table
PARTS = {"c2p": "attn_scores_content_position", "p2c": "attn_scores_position_content"}


def is_disentangled(module: torch.nn.Module) -> bool:
    return type(module).__name__ == "DisentangledSelfAttention" and hasattr(module, "query_proj")


def watch(model: torch.nn.Module) -> int:
    """Each disentangled attention module of ``model`` runs :func:`forward`; returns how many."""
    found = [m for m in model.modules() if is_disentangled(m)]
    for module in found:
        module.forward = functools.partial(forward, module)
    return len(found)


def _heads(module, x: torch.Tensor) -> torch.Tensor:
    """(B, T, nh·hd) -> (B, nh, T, hd)."""
    B, T = x.shape[:2]
    return x.view(B, T, module.num_attention_heads, -1).transpose(1, 2)


def position_parts(module, q, k, relative_pos, rel_embeddings) -> dict[str, torch.Tensor]:
    """The position terms the layer has, unscaled, each (B, nh, T, S): as the module's
    ``disentangled_attention_bias`` gathers them, before its division."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position, build_rpos

    if relative_pos is None:
        relative_pos = build_relative_position(
            q, k, bucket_size=module.position_buckets, max_position=module.max_relative_positions
        )
    relative_pos = relative_pos.reshape(relative_pos.shape[-2:]).to(device=q.device, dtype=torch.long)  # (T, S)
    span = module.pos_ebd_size
    rel = rel_embeddings[: span * 2].unsqueeze(0)  # (1, 2·span, C)
    share = module.share_att_key
    out = {}
    if "c2p" in module.pos_att_type:
        pos_k = _heads(module, (module.key_proj if share else module.pos_key_proj)(rel))[0]  # (nh, 2·span, hd)
        c2p = torch.matmul(q, pos_k.transpose(-1, -2))  # (B, nh, T, 2·span)
        index = torch.clamp(relative_pos + span, 0, span * 2 - 1)
        out[PARTS["c2p"]] = torch.gather(c2p, -1, index.expand(*c2p.shape[:2], *index.shape))
    if "p2c" in module.pos_att_type:
        pos_q = _heads(module, (module.query_proj if share else module.pos_query_proj)(rel))[0]
        r_pos = build_rpos(q, k, relative_pos, module.max_relative_positions, module.position_buckets)
        r_pos = r_pos.reshape(r_pos.shape[-2:]).to(device=q.device, dtype=torch.long)
        p2c = torch.matmul(k, pos_q.transpose(-1, -2))  # (B, nh, S, 2·span)
        index = torch.clamp(-r_pos + span, 0, span * 2 - 1)
        out[PARTS["p2c"]] = torch.gather(p2c, -1, index.expand(*p2c.shape[:2], *index.shape)).transpose(-1, -2)
    return out


def forward(
    module,
    hidden_states,
    attention_mask,
    output_attentions=False,
    query_states=None,
    relative_pos=None,
    rel_embeddings=None,
):
    """``DisentangledSelfAttention.forward``, recorded; returns what it returns."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import scaled_size_sqrt

    rec = current()
    q = _heads(module, module.query_proj(hidden_states if query_states is None else query_states))  # (B, nh, T, hd)
    k = _heads(module, module.key_proj(hidden_states))
    v = _heads(module, module.value_proj(hidden_states))
    B, nh, T, hd = q.shape
    parts = position_parts(module, q, k, relative_pos, rel_embeddings) if module.relative_attention else {}
    scale = scaled_size_sqrt(q, 1 + sum(t in module.pos_att_type for t in PARTS)).to(q.dtype)
    mask = attention_mask.bool().reshape(-1, *attention_mask.shape[-2:])[0]  # (T, S) True: may attend
    opts = rec.opts if rec is not None else None
    layer = rec.number(module) if rec is not None else 0
    divisor = float(scale) if opts is None or opts.divisor is None else float(opts.divisor)
    own = opts is None or opts.divisor is None
    edited = mask if opts is None else opts.knocked_mask(layer, mask, nh)
    sink = rec.sink if rec is not None else None
    unscaled = sink is not None and needs_unscaled(sink, layer)  # only in a layer that keeps it
    k, v = head_major(k), head_major(v)  # a block's keys: one matrix per head

    def steps(q0: int, q1: int, s: int) -> dict:
        m = edited[..., q0:q1, :s]
        qb, kb = q[:, :, q0:q1], k[:, :, :s]
        st = {"attn_scores_content": torch.matmul(qb, kb.transpose(-1, -2))}
        bias = 0
        for name in PARTS.values():
            if name in parts:
                st[name] = parts[name][:, :, q0:q1, :s]
                bias = bias + st[name] / scale  # the model's order: each term divided, then added
        raw = st["attn_scores_content"] + sum(st[n] for n in PARTS.values() if n in st)
        st["attn_scores_raw"] = raw
        scores = torch.matmul(qb, kb.transpose(-1, -2) / scale) + bias if own else raw / divisor
        st["attn_scores"] = masked_scores(scores, m)
        st["pattern"] = torch.softmax(st["attn_scores"], dim=-1)
        st["pattern_unscaled"] = torch.softmax(masked_scores(raw, m), dim=-1) if unscaled else None
        st["z"] = torch.matmul(st["pattern"], v[:, :, :s])
        return st

    if sink is not None and wants(sink, layer):
        extras = frozenset({"attn_scores_content", *parts})
        z = traced_attention(sink, layer, q, k, v, mask, divisor, steps, False, extras=extras)
        probs = None
    else:
        st = steps(0, T, k.shape[2])
        z, probs = st["z"], st["pattern"]
    if opts is not None:
        z = ablate_heads(z, layer, opts)
    context = z.transpose(1, 2).reshape(B, T, nh * hd)
    return (context, probs if output_attentions else None)
