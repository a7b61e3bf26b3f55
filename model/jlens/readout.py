"""Reading the residual stream, and each head's write, through a fitted Jacobian lens.

The Jacobian lens at block ``l`` is ``W_U · norm(J_l h_l)``: the residual stream after block ``l`` carried
to the last block by the lens's linear map ``J_l``, then the model's own final norm and LM head (what
the logit lens applies to ``h_l`` itself). After the last block ``J`` is the identity, so the last
entry is the model's own prediction, as in the logit lens.

The per-head readout applies the same map to one head's write into the residual stream at each
position (the write that direct attribution splits the logit into, :mod:`model.causal.components`):
``W_U · norm(J_l · write)``, what that head pushes the model to say later.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..backends import top_logits
from ..causal.components import capture, parts_of, writes
from ..causal.lens import Lens, blocks_and_norm, residual_stream
from ..options import AttentionOptions
from ..precision import exact_fp32
from .lensfile import JacobianLens


def _carry(lens: JacobianLens | None, layer: int, x: torch.Tensor) -> torch.Tensor:
    """``J_layer x`` for rows ``x (..., C)``; the identity after the last block, and everywhere without a lens."""
    J = None if lens is None else lens.matrix(layer, x.device, x.dtype)
    return x if J is None else x @ J.T


@torch.inference_mode()
@exact_fp32()
def jacobian_lens(
    backend, lens: JacobianLens, ids: list[int], k: int, opts: AttentionOptions = AttentionOptions()
) -> tuple[list[int], Lens]:
    """The blocks read (each source layer, then the last block) and their top ``k`` tokens ``(n, T, k)``."""
    stream = residual_stream(backend, ids, opts)  # (L + 1, T, C): after the embeddings, then each block
    _, norm = blocks_and_norm(backend)
    last = backend.facts.n_layer - 1
    after = [*lens.source_layers, last]
    carried = [_carry(lens, layer, stream[layer + 1]) if layer != last else stream[-1] for layer in after]
    parts = [top_logits(backend, norm(x), k, 1.0) for x in carried]  # (T, k), (T, k), (T,) each
    values, indices, lse = (torch.stack(p) for p in zip(*parts))
    return after, Lens(values=values, indices=indices, lse=lse)


@dataclass
class HeadReadout:
    values: torch.Tensor  # (L, nh, T, k) top logits of W_U · norm(J_l · write); NaN where layer l has no J
    indices: torch.Tensor  # (L, nh, T, k)
    lse: torch.Tensor  # (L, nh, T) float64
    read: list[bool]  # per layer: whether it was read (a source layer of the lens, or the last block)
    final: torch.Tensor  # (L, nh, T) float64: the reading's log-probability of final_ids[t] (the model's own guess)


@torch.inference_mode()
@exact_fp32()
def head_readout(
    backend, lens: JacobianLens | None, ids: list[int], k: int, final_ids: torch.Tensor | None = None
) -> HeadReadout:
    """Each head's write at every position read through its layer's J (``W_U · norm(J_l · write)``);
    ``lens=None``: the logit lens of each write (``W_U · norm(write)``). ``final_ids (T,)``: a token per
    position (the model's own top guess there) whose log-probability under each reading is kept too."""
    parts = parts_of(backend)
    T = len(ids)
    w = writes(parts, capture(backend, parts, ids, list(range(T))))  # heads: L × (nh, T, C) float64
    last = backend.facts.n_layer - 1
    norm = parts.final_norm
    dtype = next(norm.parameters(), torch.empty(0)).dtype
    values, indices, lse, read, final = [], [], [], [], []
    wanted = torch.zeros(T, dtype=torch.long) if final_ids is None else final_ids.to("cpu", torch.long)
    for layer, heads in enumerate(w.heads):
        nh = heads.shape[0]
        ok = lens is None or layer == last or layer in lens.J
        read.append(ok)
        if not ok:
            values.append(torch.full((nh, T, k), float("nan")))
            indices.append(torch.full((nh, T, k), -1, dtype=torch.long))
            lse.append(torch.full((nh, T), float("nan"), dtype=torch.float64))
            final.append(torch.full((nh, T), float("nan"), dtype=torch.float64))
            continue
        carried = _carry(lens, layer, heads.reshape(nh * T, -1))  # (nh·T, C)
        v, i, s, f = _read(backend, norm(carried.to(dtype)), k, wanted.repeat(nh))  # rows: (head, position)
        values.append(v.reshape(nh, T, -1))
        indices.append(i.reshape(nh, T, -1))
        lse.append(s.reshape(nh, T))
        final.append(f.reshape(nh, T))
    return HeadReadout(torch.stack(values), torch.stack(indices), torch.stack(lse), read, torch.stack(final))


def _read(backend, hidden: torch.Tensor, k: int, ids: torch.Tensor, chunk: int = 128):
    """The LM head over rows ``hidden (n, C)``, a chunk at a time (never n × vocab at once): each row's top
    ``k`` logits and ids, its logsumexp and the log-probability of ``ids[row]``, on the CPU, the last two
    float64."""
    parts = []
    for a in range(0, hidden.shape[0], chunk):
        logits = backend.head(hidden[a : a + chunk]).float()  # (n, V)
        top = torch.topk(logits, k=min(k, logits.shape[-1]), dim=-1)
        lse = torch.logsumexp(logits.double(), dim=-1)
        mine = logits.gather(-1, ids[a : a + chunk, None].to(logits.device))[:, 0].double() - lse
        parts.append((top.values.cpu(), top.indices.cpu(), lse.cpu(), mine.cpu()))
    return tuple(torch.cat(p) for p in zip(*parts))
