"""Why a head attends here: one head's raw score for one query and key, split bilinearly.

The residual stream entering ``layer`` is a sum of terms (:meth:`Writes.before`: the embeddings,
every earlier head, every earlier MLP, and the biases). At the query position each term goes
through the layer's input norm (scale frozen at its value on this text; its offset joins
``bias``), the q projection (its bias joins ``bias``), any q norm (Qwen3's QK-norm, scale frozen
at the full query's value) and RoPE at the query's position, as the model applies them; the key
side likewise through k. Every step is then linear, so ``q · k = Σᵢ Σⱼ qᵢ · kⱼ``: ``matrix[i][j]``
is the score between query-side term ``i`` and key-side term ``j``, and the matrix sums to
``attn_scores_raw[query][key]`` (before the divisor, any softcap and the mask; sinks never enter it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..precision import exact_fp32
from ..trace import AttentionTrace
from . import NotSplittable
from .components import LayerParts, _wide, capture, parts_of, writes
from .norms import freeze


@dataclass
class QKAttribution:
    score: float  # attn_scores_raw[query][key] as the model computed it
    components: list[str]
    matrix: torch.Tensor  # (n, n) float64: [query-side term][key-side term]
    frozen: str  # caption-ready: what the split holds fixed
    masked: bool  # the mask hides this key from this query (a later key, outside a sliding window): weight 0
    key_components: list[str] | None = None  # the key side's terms where they are not the query side's (cross)
    position_bias: float | None = None  # a term added after q·kᵀ (T5's relative position bias); None: none
    attn_scores: float | None = None  # the score the softmax sees (score / divisor + position_bias); None: masked


class _ScoreCell:
    """A trace sink keeping one cell of one layer's ``attn_scores_raw``."""

    needs_unscaled = False

    def __init__(self, layer: int, head: int, query: int, key: int) -> None:
        self.layer, self.head, self.query, self.key = layer, head, query, key
        self.value: float | None = None
        self.seen: float | None = None  # attn_scores at the cell: what the softmax sees
        self.divisor = 1.0
        self.softcap: float | None = None
        self.masked = False

    def wants(self, layer: int) -> bool:
        return layer == self.layer

    def append(self, trace: AttentionTrace) -> None:
        if trace.layer != self.layer:  # a layer the fast path cannot take (a softcap) is traced all the same
            return
        self.value = float(trace.attn_scores_raw[0, self.head, self.query, self.key])
        self.masked = not bool(trace.mask[self.query, self.key])
        self.seen = float(trace.attn_scores[0, self.head, self.query, self.key])
        self.divisor = float(trace.divisor)
        self.softcap = trace.softcap


@torch.inference_mode()
@exact_fp32()
def qk_attribution(backend, ids: list[int], layer: int, head: int, query: int, key: int) -> QKAttribution:
    """Head ``head`` of ``layer``: its raw score of ``query`` for ``key`` as query-side × key-side terms."""
    parts = parts_of(backend)
    positions = sorted({query, key})
    cell = _ScoreCell(layer, head, query, key)
    cap = capture(backend, parts, ids[: max(positions) + 1], positions, sink=cell)
    w = writes(parts, cap)
    names, terms = w.before(layer)  # (n, P, C)
    lp = parts.layers[layer]
    kv_head = head // (parts.n_head // parts.n_kv_head)
    at = {p: i for i, p in enumerate(positions)}
    q = _side(lp, parts.head_dim, cap, layer, terms, at[query], head, "q")  # (n, hs)
    k = _side(lp, parts.head_dim, cap, layer, terms, at[key], kv_head, "k")  # (n, hs)
    matrix = q @ k.T  # (n, n)
    score = cell.value
    _adds_up(float(matrix.sum()), score, float(q.sum(0).norm() * k.sum(0).norm()), cap.final.dtype)
    frozen = [f"layer {layer}'s input norm", *w.frozen[:layer]]
    if lp.q_norm is not None:
        frozen.append("its q and k norms")
    caption = ", ".join(frozen) + ": scales frozen at their values on this text"
    seen = None if cell.masked else cell.seen
    return QKAttribution(score, names, matrix.cpu(), caption, cell.masked, attn_scores=seen)


def _side(lp: LayerParts, hs: int, cap, layer: int, terms: torch.Tensor, p: int, head: int, side: str):
    """Each term's query (``side="q"``) or key at position index ``p``, for one (key/value) head: ``(n, hs)``."""
    frozen = freeze(lp.norm_in, cap.resid_in[layer][p : p + 1])
    x = frozen.linear(terms[:, p])  # (n, C)
    if frozen.offset is not None:
        x[-1] = x[-1] + frozen.offset  # the norm's offset: a bias
    wq, bq, wk, bk = lp.qk()
    proj, bias = (wq, bq) if side == "q" else (wk, bk)
    rows = _wide(proj[head * hs : (head + 1) * hs])  # (hs, C)
    out = x @ rows.T  # (n, hs)
    if bias is not None:
        out[-1] = out[-1] + _wide(bias[head * hs : (head + 1) * hs])
    norm = lp.q_norm if side == "q" else lp.k_norm
    if norm is not None:  # QK-norm: the full query (or key) of this head sets the scale
        full = out.sum(0, keepdim=True).to(cap.final.dtype)
        out = freeze(norm, full).linear(out)
    if lp.rope is not None:
        cos, sin = (_wide(t[p : p + 1]) for t in cap.rope[layer])  # (1, ·)
        x4 = out[:, None, None, :]  # (n, 1, 1, hs): n "batch rows" of one head at one position
        rotated = lp.rope(x4, x4, cos[None], sin[None])
        out = rotated[0 if side == "q" else 1][:, 0, 0]
    return out


def _adds_up(total: float, score: float | None, scale: float, dtype: torch.dtype) -> None:
    """The terms sum to the score the model computed; else :class:`NotSplittable` (never a wrong split)."""
    if score is None:
        raise NotSplittable("the layer's attention was not recorded: its scores cannot be split")
    rtol = 1e-4 if dtype == torch.float32 else 2e-2
    if abs(total - score) > rtol * (1.0 + abs(score) + 1e-3 * scale):
        raise NotSplittable(f"the terms add up to {total:.6g}, not the score {score:.6g}: this layer is not split")
