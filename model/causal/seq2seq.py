"""Direct attribution and QK attribution on an encoder-decoder (T5, BART and their kin), over the terms of
:mod:`.stacks`.

Direct attribution splits the decoder's logit at a target position. The decoder's residual stream after
its last layer is ``embed`` + each self head + each cross head + each MLP + ``bias``; each goes through
the decoder's final norm (scale frozen; none after BART's and Marian's normed layers), T5's
``d_model**-0.5`` rescale where it ties its embeddings, and the token's unembedding row. ``rest`` holds
the biases, the norms' offsets and BART's ``final_logits_bias``. The encoder's whole work enters the
decoder only through the cross heads (their keys and values are the encoder's output), so it lies inside
their parts.

QK attribution splits one head's raw score in any stack: ``encoder`` and ``decoder`` as on a decoder
(query- and key-side terms of the stack's own stream), ``cross`` with the query side's terms the
decoder's and the key side's the encoder's (named ``enc.``), through the encoder's final norm (scale
frozen: T5's RMSNorm, mBART's LayerNorm; none after BART's normed layers). T5's relative position bias is
added after q·kᵀ (its divisor is 1): ``position_bias`` is that term, and ``score / divisor +
position_bias`` is the score the softmax sees (``attn_scores``, the model's own number).
"""

from __future__ import annotations

import math

import torch

from ..precision import exact_fp32
from . import NotSplittable
from .attribution import Attribution
from .components import _wide, weight
from .norms import freeze
from .qk import QKAttribution, _adds_up, _ScoreCell
from .stacks import Stack, Sub, seen_in, stack_parts, stream


@torch.inference_mode()
@exact_fp32()
def attribute_pair(backend, position: int, token_id: int | None = None) -> Attribution:
    """The decoder's logit of ``token_id`` after target ``position`` (default: its top guess there), split;
    ``backend`` has a source and target bound (:class:`~model.families.target.TargetBound`)."""
    dec = stack_parts(backend, "decoder")
    seen = seen_in(backend, [dec], backend.target[: position + 1], {"decoder": [position]})["decoder"]
    names, terms, frozen = stream(dec, seen)  # (n, 1, C)
    h = seen.final if dec.final is None else dec.final(seen.final)  # (1, C): what the LM head reads
    if token_id is None:
        token_id = int(backend.head(h)[0].argmax())
    row = _wide(weight(backend.model.get_output_embeddings())[token_id]) * backend.logit_scale()  # (C,)
    rest = _head_bias(backend, token_id)
    logit = float(_wide(h[0]) @ row) + rest
    d = row
    if dec.final is not None:
        norm = freeze(dec.final, seen.final)
        d = norm.mult[0] * row
        d = d - d.mean() if norm.centred else d  # (x − mean x) · d = x · (d − mean d)
        rest += 0.0 if norm.offset is None else float(norm.offset @ row)
        frozen = ["the decoder's final norm", *frozen]
    parts = dict(zip(names, (terms[:, 0] @ d).tolist()))
    L, nh = len(dec.layers), dec.n_head
    grid = [[[parts.get(f"L{i}{x}{j}", 0.0) for j in range(nh)] for i in range(L)] for x in "HC"]
    words = ", ".join(frozen) + ": scales frozen at their values on this text" if frozen else "nothing frozen"
    if backend.logit_scale() != 1.0:
        words += f"; the LM head reads the state times d_model^-0.5 ({backend.logit_scale():.6g}), a constant"
    cap = getattr(backend.model.get_decoder().config, "final_logit_softcapping", None)
    return Attribution(
        position=position, token_id=token_id, logit=logit, heads=torch.tensor(grid[0], dtype=torch.float64),
        mlps=torch.tensor([parts[f"L{i}.mlp"] for i in range(L)], dtype=torch.float64), mixers=[None] * L,
        unsplit=None, embed=parts["embed"], rest=rest + parts["bias"], frozen=words, final_softcap=cap or None,
        cross_heads=torch.tensor(grid[1], dtype=torch.float64),
    )


def _head_bias(backend, token_id: int) -> float:
    """What the LM head adds to the token's logit whatever the state: its bias, BART's ``final_logits_bias``."""
    out = 0.0
    bias = getattr(backend.model.get_output_embeddings(), "bias", None)
    if bias is not None:
        out += float(bias[token_id])
    final = getattr(backend.model, "final_logits_bias", None)
    if final is not None:
        out += float(final[0, token_id])
    return out


@torch.inference_mode()
@exact_fp32()
def qk_pair(backend, layer: int, head: int, query: int, key: int, ids: list[int] | None = None) -> QKAttribution:
    """Head ``head`` of ``layer`` in the bound ``backend``'s stack: its raw score of ``query`` (the query side's
    position) for ``key`` (the key side's) as query-side × key-side terms. An encoder (BERT and its kin,
    one stack, ``ids`` its text) is split as an encoder-decoder's encoder."""
    looked = "encoder" if ids is not None else backend.stack
    ids = backend.ids if ids is None else ids
    enc = stack_parts(backend, "encoder")
    qst = enc if looked == "encoder" else stack_parts(backend, "decoder")
    kst = enc if looked == "cross" else qst
    kind = "cross" if looked == "cross" else "self"
    s, sub = qst.find(layer, kind)
    positions = {qst.name: sorted({query, key})} if kst is qst else {qst.name: [query], kst.name: [key]}
    source = _bias_layer(qst, layer) if kind == "self" else None
    cell = _ScoreCell(layer, head, query, key)
    seen = seen_in(backend, [enc, qst] if kst is not qst else [qst], ids, positions, cell,
                   None if source is None else (qst.name, source))
    qi, ki = positions[qst.name].index(query), positions[kst.name].index(key)
    qnames, qterms, frozen = stream(qst, seen[qst.name], (layer, kind))
    if kst is qst:
        knames, kterms = qnames, qterms
        resid, rope = seen[qst.name].sub_in[(layer, s)], seen[qst.name].rope.get((layer, s))
        q = _project(sub, "q", qterms[:, qi], resid[qi : qi + 1], head, qst.n_head, rope, qi)
        k = _project(sub, "k", kterms[:, ki], resid[ki : ki + 1], head, qst.n_head, rope, ki)
    else:  # cross: the keys read the encoder's output, its terms through the encoder's final norm
        names, kterms, kfrozen = stream(kst, seen[kst.name])
        knames = [f"enc.{n}" for n in names]
        if kst.final is not None:
            norm = freeze(kst.final, seen[kst.name].final)
            kterms = norm.linear(kterms)
            if norm.offset is not None:
                kterms[-1] = kterms[-1] + norm.offset
            kfrozen = ["the encoder's final norm", *kfrozen]
        frozen += kfrozen
        resid = seen[qst.name].sub_in[(layer, s)]
        q = _project(sub, "q", qterms[:, qi], resid, head, qst.n_head, None, 0)
        k = _project(sub, "k", kterms[:, ki], None, head, qst.n_head, None, 0)
    matrix = q @ k.T  # (n_query_terms, n_key_terms)
    _adds_up(float(matrix.sum()), cell.value, float(q.sum(0).norm() * k.sum(0).norm()), torch.float32)
    bias = None if source is None else float(seen[qst.name].bias[source][query, key, head])
    seen_score = None if cell.masked else cell.seen
    if seen_score is not None:  # the model's own number, from the terms and the bias (capped where it caps)
        sees = cell.value / cell.divisor + (bias or 0.0)
        sees = sees if cell.softcap is None else cell.softcap * math.tanh(sees / cell.softcap)
        _adds_up(sees, seen_score, 0.0, torch.float32)
    if sub.norm_in is not None:
        frozen = [f"the {qst.name}'s layer {layer} {kind}-attention input norm", *frozen]
    words = ", ".join(frozen) + ": scales frozen at their values on this text" if frozen else "nothing frozen"
    return QKAttribution(cell.value, qnames, matrix.cpu(), words, cell.masked,
                         knames if kst is not qst else None, bias, seen_score)


def _bias_layer(st: Stack, layer: int) -> int | None:
    """The layer whose relative position bias ``layer``'s self-attention adds (T5: the first layer's, shared;
    UMT5: its own), or None where the family has none."""
    for i in range(layer, -1, -1):
        _, sub = st.find(i, "self")
        if getattr(sub.module, "relative_attention_bias", None) is not None:
            return i
    return None


def _project(sub: Sub, side: str, terms: torch.Tensor, resid: torch.Tensor | None, head: int, n_head: int,
             rope, p: int) -> torch.Tensor:
    """Each term ``(n, C)`` as this head's query (``side="q"``) or key ``(n, hs)``: through the sublayer's input
    norm frozen at ``resid`` (the full stream there; None: the keys of a cross-attention, read unnormed), the
    projection's rows (its bias joins the last term, ``bias``) and RoPE at position index ``p``."""
    x = terms
    if resid is not None and sub.norm_in is not None:
        norm = freeze(sub.norm_in, resid)
        x = norm.linear(x)
        if norm.offset is not None:
            x[-1] = x[-1] + norm.offset
    wq, bq, wk, bk = sub.qk()
    hs = wq.shape[0] // n_head
    if side == "k":
        head = head // (n_head // (wk.shape[0] // hs))  # its key/value head, with grouped-query attention
    proj, bias = (wq, bq) if side == "q" else (wk, bk)
    out = x @ _wide(proj[head * hs : (head + 1) * hs]).T  # (n, hs)
    if bias is not None:
        out[-1] = out[-1] + _wide(bias[head * hs : (head + 1) * hs])
    if sub.rope is not None:
        if rope is None:
            raise NotSplittable("the rotary embedding's cos and sin were not passed to the attention")
        cos, sin = (_wide(t[p : p + 1]) for t in rope)
        x4 = out[:, None, None, :]
        out = sub.rope(x4, x4, cos[None], sin[None])[0 if side == "q" else 1][:, 0, 0]
    return out
