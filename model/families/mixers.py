"""The implicit attention of a hybrid's mixers that are linear in their values, a block of rows at a time.

Each function takes the tensors one layer fed its own scan (:mod:`model.families.implicit` records
them) laid out per head, ``(heads, T, ...)``, and returns ``M[:, r0:r1, :]``, ``(heads, r1 - r0, T)``,
with the layer's output (before its output gate, norm and projection) ``o_t = Σ_s M[t, s] v_s`` plus
``skip · v_t`` where the mixer has one. M is not a softmax: it may be negative and its rows need not
sum to 1. Entries after the query (``s > t``) are 0.

* Gated DeltaNet (:func:`delta_blocks`): ``A_r = exp(g_r) (I − β_r k_r k_rᵀ)``,
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


DELTA_CHUNK = 64  # queries and keys per chunk of the delta rule's chunked (WY) form
SUBNORMAL = 1e-30  # a state entry below this is 0 (float32's smallest normal number is 1.2e-38)


def delta_blocks(q, k, g, beta, upto: int | None = None, chunk: int = DELTA_CHUNK):
    """Gated DeltaNet's (and Kimi Delta Attention's) M a chunk of query rows at a time, first to last:
    yields ``(r0, r1, M[:, r0:r1, :])`` until row ``upto`` (all rows when None). ``q``, ``k`` (heads, T, d)
    as the scan reads them (l2-normalised, q scaled), ``g`` (heads, T) the log decay (per channel:
    (heads, T, d)), ``beta`` (heads, T).

    M is the delta rule run with each token's value its own one-hot vector: the state
    ``S_t = Σ_{s≤t} A_t ⋯ A_{s+1} β_s k_s e_sᵀ`` (heads, d, T) gives ``M[t, :] = q_tᵀ S_t`` and
    ``S_t = D_t S_{t−1} + k_t u_t`` with ``u_t = β_t (e_tᵀ − k_tᵀ D_t S_{t−1})``. Inside a chunk the u of
    its C steps come from one triangular solve, ``(I + L) U = diag(β) (E − K̃ S_0)`` with
    ``L[i, j] = β_i k_iᵀ diag(Γ_i / Γ_j) k_j`` (j < i; Γ the decay since the chunk began) and ``K̃`` the keys
    times Γ; the chunk's rows are ``Q̃ S_0 + (Q Kᵀ decayed, j ≤ i) U`` and the state is carried to the next
    chunk as ``diag(Γ_last) S_0 + K̂ᵀ U``. A chunk costs O(C · d · T) (only the columns up to its last key),
    so a layer O(T² d) and memory O(d · T) per head, never O(T² d²)."""
    H, T, d = q.shape
    upto = T if upto is None else upto
    S = q.new_zeros(H, d, upto)
    logs = _channels(g, d)
    for a in range(0, upto, chunk):
        b = min(a + chunk, upto)
        C = b - a
        G = torch.cumsum(logs[:, a:b], dim=1)  # (H, C, d): log Γ_i, ≤ 0
        kc, qc, bc = k[:, a:b], q[:, a:b], beta[:, a:b]
        kk, qk = _decayed_products(kc, qc, G, g.dim() == 2)  # k_iᵀ diag(Γ_i / Γ_j) k_j and q_i's, j ≤ i
        L = (bc[..., None] * kk).tril(-1)
        rhs = -torch.einsum("hic,hct->hit", kc * torch.exp(G), S[:, :, :b])  # −K̃ S_0 over the columns so far
        rhs[:, torch.arange(C), torch.arange(a, b)] += 1.0  # + E: each step's own one-hot value
        eye = torch.eye(C, dtype=q.dtype, device=q.device)
        U = torch.linalg.solve_triangular(eye + L, bc[..., None] * rhs, upper=False, unitriangular=True)
        rows = torch.einsum("hic,hct->hit", qc * torch.exp(G), S[:, :, :b]) + qk @ U
        S[:, :, :b] = torch.exp(G[:, -1])[..., None] * S[:, :, :b] + torch.einsum(
            "hjc,hjt->hct", kc * torch.exp(G[:, -1:] - G), U
        )
        # what has decayed below float32's normal numbers becomes 0 (as a CPU flushing subnormals would):
        # subnormals make every later product of the state 10× slower on the CPU
        S[:, :, :b].masked_fill_(S[:, :, :b].abs() < SUBNORMAL, 0.0)
        yield a, b, torch.nn.functional.pad(rows, (0, T - b))


def _decayed_products(kc, qc, G, scalar: bool):
    """Inside a chunk, ``k_iᵀ diag(Γ_i / Γ_j) k_j`` and ``q_iᵀ diag(Γ_i / Γ_j) k_j`` for j ≤ i (0 above), (H, C, C):
    with one decay per head (Gated DeltaNet) the ratio is a scalar; per channel (Kimi) it is summed over them."""
    C = kc.shape[1]
    lower = torch.tril(torch.ones(C, C, dtype=torch.bool, device=kc.device))
    if scalar:
        ratio = torch.exp((G[:, :, None, 0] - G[:, None, :, 0]).masked_fill(~lower, float("-inf")))
        return (kc @ kc.transpose(1, 2)) * ratio, (qc @ kc.transpose(1, 2)) * ratio
    ratio = torch.exp((G[:, :, None, :] - G[:, None, :, :]).masked_fill(~lower[None, :, :, None], float("-inf")))
    kr = kc[:, None, :, :] * ratio  # (H, i, j, d): k_j decayed to step i
    return (kc[:, :, None, :] * kr).sum(-1), (qc[:, :, None, :] * kr).sum(-1)


def delta_rows(q, k, g, beta, r0: int, r1: int, chunk: int = DELTA_CHUNK):
    """M for queries ``r0 .. r1 - 1`` (heads, r1 - r0, T), from :func:`delta_blocks` run up to ``r1``."""
    out = q.new_zeros(q.shape[0], r1 - r0, q.shape[1])
    for a, b, rows in delta_blocks(q, k, g, beta, r1, chunk):
        lo, hi = max(a, r0), min(b, r1)
        if lo < hi:
            out[:, lo - r0 : hi - r0] = rows[:, lo - a : hi - a]
    return out


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
    "implicit": "true for a value-linear mixer's layer (asked for by number in `layers` or `mixers`): each head's "
    "`pattern` is M, o_t = Σ_s M[t, s] v_s + skip · v_t, exact; not a softmax (signed, rows need not sum to 1); its "
    "`thumbnail` M pooled keeping the sign, its statistics those of |M| normalised per row; no divisor, softcap "
    "or window; absent for softmax layers",
    "mixer": "implicit layers: gated_deltanet (M[t,s] = β_s k_sᵀ A_{s+1}⋯A_t q_t, "
    "A_r = exp(g_r)(I − β_r k_r k_rᵀ)), mamba2 (M[t,s] = (C_t·B_s) exp(A Σ_{r=s+1..t} Δ_r) Δ_s), "
    "lightning (q_t·k_s decay^(t−s)), mamba1 (per channel: Σ_n C_t[n] exp(A[c,n] Σ_{r=s+1..t} Δ_r[c]) B_s[n] "
    "Δ_s[c]), short_conv (per channel: C_t w_{t−s} B_s)",
    "per_channel": "implicit layers: true where M is one matrix per channel (mamba1, short_conv): the one head sent "
    "is the mean over channels of |M|, not a reconstruction",
    "skip": "implicit layers: each head's skip (Mamba-2's D); null if none or per channel",
}
