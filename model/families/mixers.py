"""The implicit attention of a hybrid's mixers that are linear in their values, a block of rows at a time.

Each function takes the tensors one layer fed its own scan (:mod:`model.families.implicit` records
them) laid out per head, ``(heads, T, ...)``, and returns ``M[:, r0:r1, :]``, ``(heads, r1 - r0, T)``,
with the layer's output (before its output gate, norm and projection) ``o_t = Σ_s M[t, s] v_s`` plus
``skip · v_t`` where the mixer has one. M is not a softmax: it may be negative and its rows need not
sum to 1. Entries after the query (``s > t``) are 0.

* Gated DeltaNet (:func:`delta_rows`): ``A_r = exp(g_r) (I − β_r k_r k_rᵀ)``,
  ``M[t, s] = β_s k_sᵀ A_{s+1} ⋯ A_t q_t``; Kimi Delta Attention the same with a decay per channel,
  ``A_r = (I − β_r k_r k_rᵀ) diag(exp(g_r))`` and ``M[t, s] = β_s k_sᵀ A_{s+1}ᵀ ⋯ A_tᵀ q_t``.
* Mamba-2 (:func:`mamba2_rows`): ``M[t, s] = (C_t · B_s) exp(A_h Σ_{r=s+1..t} Δ_r) Δ_s``.
* Mamba-1 (:func:`mamba1_rows`): per channel c, ``M_c[t, s] = Σ_n C_t[n] exp(A[c, n] Σ_{r=s+1..t} Δ_r[c])
  B_s[n] Δ_s[c]``.
* Lightning attention (:func:`lightning_rows`): ``M[t, s] = (q_t · k_s) exp(−slope_h (t − s))``.
* Short convolutions (:func:`short_conv_rows`): one matrix per channel c,
  ``M_c[t, s] = C_t[c] w[c, L − 1 − (t − s)] B_s[c]`` for ``0 ≤ t − s < L``.
"""

from __future__ import annotations

import torch


def causal_rows(r0: int, r1: int, T: int, device) -> torch.Tensor:
    """(r1 - r0, T) True where key s may be read by query t (s ≤ t)."""
    t = torch.arange(r0, r1, device=device)[:, None]
    return torch.arange(T, device=device)[None, :] <= t


DELTA_CHUNK = 64  # keys per chunk of the delta rule's operators


def delta_chunks(k: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, chunk: int = DELTA_CHUNK):
    """The delta rule's operators, every chunk of keys ``[a, b)`` at once (one step per key of a chunk):
    ``U`` (heads, T, d), ``u_s = A_{b-1} ⋯ A_{s+1} β_s k_s``, and ``P`` (heads, chunks, d, d),
    ``A_{b-1} ⋯ A_a``, with ``A_r = (I − β_r k_r k_rᵀ) diag(exp(g_r))`` (``g`` (heads, T) one decay per
    head, or (heads, T, d) one per channel); ``M[t, s] = W · u_s`` for ``W = A_bᵀ ⋯ A_tᵀ q_t``."""
    H, T, d = k.shape
    n = -(-T // chunk)
    pad = n * chunk - T  # padded steps: g = 0, β = 0, A = I
    kc = torch.nn.functional.pad(k, (0, 0, 0, pad)).reshape(H, n, chunk, d)
    bkc = torch.nn.functional.pad(beta[..., None] * k, (0, 0, 0, pad)).reshape(H, n, chunk, d)
    decay = torch.exp(torch.nn.functional.pad(_channels(g, d), (0, 0, 0, pad))).reshape(H, n, chunk, d)
    P = torch.eye(d, dtype=k.dtype, device=k.device).expand(H, n, d, d).clone()
    U = torch.empty(H, n, chunk, d, dtype=k.dtype, device=k.device)
    for i in range(chunk - 1, -1, -1):
        U[:, :, i] = torch.einsum("hnij,hnj->hni", P, bkc[:, :, i])
        along = torch.einsum("hnij,hnj->hni", P, kc[:, :, i])
        P = (P - along[..., None] * bkc[:, :, i, None, :]) * decay[:, :, i, None, :]
    return U.reshape(H, n * chunk, d)[:, :T], P


def delta_rows(q, k, g, beta, r0: int, r1: int, chunks=None, chunk: int = DELTA_CHUNK):
    """Gated DeltaNet's (and Kimi Delta Attention's) M for queries ``r0 .. r1 - 1``: ``q``, ``k`` (heads,
    T, d) as the scan reads them (l2-normalised, q scaled), ``g`` (heads, T) the log decay (per channel:
    (heads, T, d)), ``beta`` (heads, T); ``chunks``
    :func:`delta_chunks` of the same tensors (computed here when None). Each row's vector
    ``A_{s+1} ⋯ A_t q_t`` is carried from its own chunk down to the first, a chunk at a time (two
    matrix products), and step by step only inside the chunk where its query is."""
    H, T, d = q.shape
    U, P = chunks if chunks is not None else delta_chunks(k, g, beta, chunk)
    w = q.new_zeros(H, r1 - r0, d)
    out = q.new_zeros(H, r1 - r0, T)
    for j in range((r1 - 1) // chunk, -1, -1):
        a, b = j * chunk, min((j + 1) * chunk, T)
        out[:, :, a:b] = torch.einsum("hrd,hsd->hrs", w, U[:, a:b])
        w = torch.einsum("hrd,hde->hre", w, P[:, j])
        lo, hi = max(a, r0), min(b, r1)
        if lo < hi:  # queries of this chunk: step by step over its keys
            w[:, lo - r0 : hi - r0] = _delta_steps(q, k, g, beta, out[:, lo - r0 : hi - r0], a, lo, hi)
    return out


def _delta_steps(q, k, g, beta, out, a: int, lo: int, hi: int) -> torch.Tensor:
    """Queries ``lo .. hi - 1`` over keys ``hi - 1`` down to ``a``: their cells written into ``out``
    (heads, hi - lo, T); returns their vectors after key ``a``."""
    H, _, d = q.shape
    w = q.new_zeros(H, hi - lo, d)
    for s in range(hi - 1, a - 1, -1):
        if s >= lo:
            w[:, s - lo] = q[:, s]
        bk = beta[:, s, None] * k[:, s]
        out[:, :, s] = torch.einsum("hrd,hd->hr", w, bk)
        along = torch.einsum("hrd,hd->hr", w, k[:, s])
        w = (w - along[..., None] * bk[:, None, :]) * torch.exp(_channels(g, d)[:, s])[:, None, :]
    return w


def _channels(g: torch.Tensor, d: int) -> torch.Tensor:
    """The log decay per channel, (heads, T, d): Gated DeltaNet's one per head and step spread over the
    channels, Kimi Delta Attention's as it is."""
    return g[..., None].expand(*g.shape, d) if g.dim() == 2 else g


def mamba2_rows(C: torch.Tensor, B: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, r0: int, r1: int):
    """Mamba-2's M for queries ``r0 .. r1 - 1``: ``C``, ``B`` (heads, T, state) with the groups
    repeated to heads, ``dt`` (heads, T) after its bias, softplus and limits, ``A`` (heads,)."""
    H, T, _ = B.shape
    a = torch.cumsum(A[:, None].double() * dt.double(), dim=1)
    seg = a[:, r0:r1, None] - a[:, None, :]
    allowed = causal_rows(r0, r1, T, B.device)
    decay = torch.exp(seg.masked_fill(~allowed, float("-inf"))).to(B.dtype)
    return torch.einsum("hrn,hsn->hrs", C[:, r0:r1], B) * decay * dt[:, None, :]


def mamba1_rows(C: torch.Tensor, B: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, r0: int, r1: int):
    """Mamba-1's M per channel for queries ``r0 .. r1 - 1``: ``C``, ``B`` (T, state) shared by every
    channel, ``dt`` (channels, T) after its bias and softplus, ``A`` (channels, state);
    ``M_c[t, s] = Σ_n C_t[n] exp(A[c, n] Σ_{r=s+1..t} Δ_r[c]) B_s[n] Δ_s[c]``: (channels, r1 - r0, T)."""
    ch, T = dt.shape
    a = torch.cumsum(dt.double(), dim=1)
    seg = (a[:, r0:r1, None] - a[:, None, :]).clamp(min=0)  # (ch, R, T)
    allowed = causal_rows(r0, r1, T, dt.device)
    decay = torch.exp(A.double()[:, None, None, :] * seg[..., None]).to(dt.dtype)  # (ch, R, T, state)
    M = torch.einsum("rn,crsn,sn->crs", C[r0:r1], decay, B)
    return M * allowed * dt[:, None, :]


def lightning_rows(q: torch.Tensor, k: torch.Tensor, slope: torch.Tensor, r0: int, r1: int):
    """Lightning attention's M for queries ``r0 .. r1 - 1``: ``q``, ``k`` (heads, T, d) after the
    layer's activation, ``slope`` (heads,) the decay rate per head."""
    H, T, _ = k.shape
    allowed = causal_rows(r0, r1, T, k.device)
    lag = (torch.arange(r0, r1, device=k.device)[:, None] - torch.arange(T, device=k.device)[None, :]).to(k.dtype)
    decay = torch.exp(-slope[:, None, None] * lag.clamp(min=0)) * allowed
    return torch.einsum("hrd,hsd->hrs", q[:, r0:r1], k) * decay


def short_conv_rows(Bg: torch.Tensor, Cg: torch.Tensor, weight: torch.Tensor, r0: int, r1: int):
    """A gated short convolution's M per channel for queries ``r0 .. r1 - 1``: ``Bg``, ``Cg``
    (channels, T) the input and output gates, ``weight`` (channels, L) the depthwise kernel;
    (channels, r1 - r0, T)."""
    ch, T = Bg.shape
    L = weight.shape[-1]
    lag = torch.arange(r0, r1, device=Bg.device)[:, None] - torch.arange(T, device=Bg.device)[None, :]
    inside = (lag >= 0) & (lag < L)
    taps = weight[:, (L - 1 - lag).clamp(0, L - 1)] * inside
    return Cg[:, r0:r1, None] * taps * Bg[:, None, :]


# what an answer's implicit layer holds, as the API's schema says it
MEANINGS = {
    "implicit": "true for a value-linear mixer's layer (asked for by number in `layers`): each head's `pattern` is "
    "M, o_t = Σ_s M[t, s] v_s + skip · v_t, exact; not a softmax (signed, rows need not sum to 1); no divisor, "
    "softcap, window or statistics; absent for softmax layers",
    "mixer": "implicit layers: gated_deltanet (M[t,s] = β_s k_sᵀ A_{s+1}⋯A_t q_t, "
    "A_r = exp(g_r)(I − β_r k_r k_rᵀ)), mamba2 (M[t,s] = (C_t·B_s) exp(A Σ_{r=s+1..t} Δ_r) Δ_s), "
    "lightning (q_t·k_s decay^(t−s)), mamba1 (per channel: Σ_n C_t[n] exp(A[c,n] Σ_{r=s+1..t} Δ_r[c]) B_s[n] "
    "Δ_s[c]), short_conv (per channel: C_t w_{t−s} B_s)",
    "per_channel": "implicit layers: true where M is one matrix per channel (mamba1, short_conv): the one head sent "
    "is the mean over channels of |M|, not a reconstruction",
    "skip": "implicit layers: each head's skip (Mamba-2's D); null if none or per channel",
}
