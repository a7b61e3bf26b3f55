"""Per-head statistics of one attention layer: the one implementation of them.

The variance lesson's numbers for a real model: how much q·kᵀ varies before and after the
divisor (``variance_ratio`` is ``divisor²``, so ``d_k`` for the trained default; NaN, ``null`` in
the API, where the scaled scores do not vary and the ratio is 0 / 0), and how
peaky each head's softmax rows are with and without the divisor (entropy, mean row maximum).
The service, ``attnscope inspect`` and :func:`model.inspection.head_stats` all use
:class:`StatsAccumulator`; the service's capture feeds it inside the forward pass, a layer and a block
of query rows at a time, on the device the model is on.
"""

from __future__ import annotations

import functools

import torch
from torch.nn import functional as F

STAT_SCALARS = (
    "var_q", "var_k", "mean_scores_raw", "mean_scores", "var_scores_raw", "var_scores", "variance_ratio",
    "entropy", "entropy_unscaled", "max_weight", "max_weight_unscaled",
)
STAT_ROWS = ("row_entropy", "row_entropy_unscaled")


def _var(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """Population variance over ``dims`` (centred first; faster than ``Tensor.var`` on CPU)."""
    centred = x - x.mean(dims, keepdim=True)
    return (centred * centred).mean(dims)


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise dot product over the last axis: (..., T, S) -> (..., T), broadcasting (a (T, S)
    mask against (heads, T, S) rows); bitwise what ``(a * b).sum(-1)`` gives (torch 2.13)."""
    return torch.linalg.vecdot(a, b)


def _zero_masked(x: torch.Tensor, mask: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """``x`` (..., t, s) with 0 where the query does not see the key, in place. On the CPU a product with the
    0/1 mask from the first key a query of the block does not see on (a causal block's last t keys); there
    ``masked_fill`` and ``where`` with a mask broadcast over the heads are 5-8× slower (torch 2.13). On a GPU
    ``masked_fill``, so that an overflow in a masked half-precision score stays out (inf · 0 is NaN)."""
    if x.device.type != "cpu":
        return x.masked_fill_(~mask, 0.0)
    hidden = (~mask).reshape(-1, mask.shape[-1]).any(0)  # (s,) the keys some query does not see
    lo = 0 if torch.compiler.is_compiling() else int(torch.cat([hidden, hidden.new_ones(1)]).byte().argmax())
    x[..., lo:].mul_(visible[..., lo:])
    return x


def _dot_spent(y: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``_dot(p, y)`` bitwise, written into ``y`` (spent): no (..., t, s) product allocated (on the CPU a new
    block-sized tensor costs several times the pass that fills it, torch 2.13)."""
    return y.mul_(p).sum(-1)


GROUP = 64  # keys per group in group_max
POOL_BELOW = 32  # runs shorter than this: max_pool1d on the CPU


def group_max(x: torch.Tensor, k: int) -> torch.Tensor:
    """(..., s) -> (..., ceil(s / k)): the maximum of each run of k keys (the last run may be shorter).

    A view and ``amax``: on the CPU 5× faster than ``max_pool2d`` over (1, k), which also
    writes the index of every maximum; but ``amax`` over runs shorter than :data:`POOL_BELOW` is
    2-4× slower there than ``max_pool1d`` (torch 2.13: 400 against 140 µs for runs of 4 over a
    4 × 256 × 256 pattern), so short runs take that."""
    s = x.shape[-1]
    if 1 < k < POOL_BELOW and x.device.type == "cpu" and not torch.compiler.is_compiling():
        return F.max_pool1d(x.reshape(-1, 1, s), k, ceil_mode=True).view(*x.shape[:-1], -1)
    full = s - s % k
    pooled = x[..., :full].unflatten(-1, (full // k, k)).amax(-1)
    if full == s:
        return pooled
    return torch.cat([pooled, x[..., full:].amax(-1, keepdim=True)], dim=-1)


def row_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x.max(-1)``: each row's largest value and its index. On the CPU ``max`` with indices is
    5-7× slower than ``amax`` (torch 2.13), so the maximum of each group of :data:`GROUP` keys
    comes first, then the index inside the winning group; a GPU and compiled code take the one kernel."""
    if torch.compiler.is_compiling() or x.device.type != "cpu" or x.shape[-1] <= 2 * GROUP:
        return x.max(-1)
    s = x.shape[-1]
    value, group = group_max(x, GROUP).max(-1)  # (...,) the winning group
    start = group * GROUP
    index = (start[..., None] + torch.arange(GROUP, device=x.device)).clamp_max_(s - 1)  # (..., GROUP)
    _, inside = x.gather(-1, index).max(-1)
    return value, (start + inside).clamp_max_(s - 1)


def _capped(raw: torch.Tensor, softcap: float, top: torch.Tensor) -> torch.Tensor:
    """softcap·tanh(raw / softcap), centred on each row's top key (what divisor 1 gives under softcapping)."""
    capped = torch.tanh(raw / softcap) * softcap
    return capped - capped.gather(-1, top[..., None])


def merge_rows(n, mean, m2, n_row, s1, s2, c):
    """Rows merged into running moments ``(n, mean, m2)``: Chan et al.'s update in float64.

    Each row arrives as its count ``n_row`` (t,) and, over (..., t), its sums ``s1 = Σ y`` and
    ``s2 = Σ y²`` of the scores centred on a value ``c`` of the row (its top score): float32 passes
    over the block, and the centring keeps a large offset common to a row's scores from cancelling
    its variance away. Only (heads, rows)-sized tensors are float64: no float64 T×T tensor is built."""
    n_row, s1, s2, c = n_row.double(), s1.double(), s2.double(), c.double()
    mean_r = c + s1 / n_row  # (..., t) each row's mean
    m2_r = (s2 - s1 * s1 / n_row).clamp_min(0)  # (..., t) each row's squared deviations
    n_b = n_row.sum()
    mean_b = (n_row * mean_r).sum(-1) / n_b  # (...,)
    m2_b = m2_r.sum(-1) + (n_row * (mean_r - mean_b[..., None]) ** 2).sum(-1)
    total = n + n_b
    delta = mean_b - mean
    return total, mean + delta * (n_b / total), m2 + m2_b + delta * delta * (n * n_b / total)


class StatsAccumulator:
    """Per-head statistics of one attention layer, taken a block of query rows at a time.

    ``q, k (..., T, hs)`` give ``var_q``, ``var_k``; each :meth:`add` brings the next rows of the
    raw scores, the scores softmax saw and the pattern, ``(..., t, S)``, with their mask rows ``(t, S)``;
    ``...`` = heads, or layers and heads. :meth:`result` gives the definitions of
    :func:`model.inspection.head_stats` (a test holds them equal to a direct computation):
    population means and variances over unmasked entries, row entropies in nats, mean row maxima.

    * ``variance_ratio`` = var(raw) / var(scaled): ``divisor²`` whenever the scores vary, NaN
      (undefined, ``null`` in the API) where the scaled scores do not vary, e.g. a one-token text:
      0 / 0 has no value. Every other statistic is defined for any text, as each query sees at
      least one key.
    * Variances come from per-row sums of the scores centred on the row's top score, merged across
      rows and blocks in float64 on (heads, rows)-sized tensors (:func:`merge_rows`).
    * The entropy of a softmax row needs no logarithm per entry: for ``p = softmax(s)`` over the
      visible keys, ``H = -log max p - Σ p·(s - max s)``. Scores are centred on each row's top key
      ``c`` first, so large scores (a small divisor) do not cancel in float32.
    * The unscaled softmax (divisor 1) is never built: with ``e = exp(raw - c)`` over the visible
      keys and ``Z = Σ e``, its row maximum is ``1 / Z`` and its entropy ``log Z - Σ e·(raw - c) / Z``.

    With ``softcap`` (Gemma 2), or ``shifted`` (T5's position bias added to them), the scores are not
    a multiple of the raw ones: their moments and the entropies are taken from the scores themselves.
    With learned sinks (gpt-oss, ``sink_logit``
    (...,) one per head) a row's softmax has one more column, the sink's, then dropped: the
    entropies and the unscaled row maximum are those of the whole softmax, sink included
    (``H - m·(s_sink - max s)`` with the sink's share ``m = p_max·exp(s_sink - max s)``). Everything
    stays float32 on the device.

    With ``part`` (T5Gemma 2's decoder and cross blocks of one softmax, :mod:`model.families.merged`) the rows
    are one block of a wider softmax: the entropy is −Σ p ln p over the block's own weights.

    With ``fuse`` the start, each block's passes and merges, and the summary each run as one
    compiled function (:func:`fused`, ``torch.compile``): the same arithmetic in a few kernels where
    eager launches some sixty a block, which is what a GPU's launch-bound short text spends its
    time on. Compiling takes seconds to a minute once a process and kind of input; the sums may
    differ from eager's in their last float32 bits (their order).
    """

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        divisor: float,
        softcap: float | None = None,
        sink_logit=None,
        fuse: bool = False,
        shifted: bool = False,
        unscaled: bool = True,
        part: bool = False,
    ) -> None:
        self.divisor, self.softcap = float(divisor), softcap
        self.part = part  # rows that are one block of a wider softmax (T5Gemma 2): they sum to less than 1
        self.unscaled = unscaled  # False: no statistics of the unscaled softmax (one exp of each score less)
        self.sink = None if sink_logit is None else sink_logit.float()[..., None]  # (..., 1): against each row
        # compiled where asked, except for a one-token text: to the compiler a size of 1 is a shape of its own
        self.fuse = fuse and q.shape[-2] > 1
        self._terms, self._summary = (fused("block_terms"), fused("summary")) if self.fuse else (block_terms, summary)
        # q, k (..., T, hs); running (count, mean, squared deviations) of the raw scores, and of the
        # scores themselves when softcapped
        start = fused("opening") if self.fuse else opening
        # softcapped, or shifted by a position bias (T5): the scores are no multiple of the raw ones
        self.var_q, self.var_k, self.raw, self.scaled = start(q, k, softcap is not None or shifted)
        self.rows: dict[str, list[torch.Tensor]] = {name: [] for name in ROW_TERMS}
        # from the centred raw scores where the divisor is at least 1 and nothing caps the scores
        self.from_raw = self.divisor >= 1 and softcap is None and not shifted
        # compiled, the divisor is a tensor: any value (a what-if's scale) runs the same kernels
        self._divisor = torch.full((), self.divisor, device=q.device) if self.fuse else self.divisor

    def add(
        self, raw: torch.Tensor, scores: torch.Tensor, pattern: torch.Tensor, mask: torch.Tensor
    ) -> None:
        """The next ``t`` rows over the first ``s`` keys: ``raw``, ``scores``, ``pattern`` (..., t, s),
        ``mask`` (t, s)."""
        terms = self._terms
        if self.fuse and min(raw.shape[-2:]) == 1:  # a block of one row (or one key): eager, as above
            terms = block_terms
        elif self.fuse:  # a slice's strides, or a view's base, would be one more kind of input to compile for
            raw, scores, pattern = (x.contiguous() for x in (raw, scores, pattern))
            mask = mask.clone(memory_format=torch.contiguous_format)  # (t, s) bool: small
        self.raw, self.scaled, rows = terms(
            raw, scores, pattern, mask, self.raw, self.scaled, self._divisor, self.from_raw, self.softcap, self.sink,
            self.unscaled, self.part,
        )
        for name, value in zip(ROW_TERMS, rows, strict=True):
            self.rows[name].append(value)

    def result(self) -> dict[str, torch.Tensor]:
        rows = [torch.cat(self.rows[name], dim=-1) if self.rows[name][0] is not None else None for name in ROW_TERMS]
        return self._summary(self.var_q, self.var_k, self.raw, self.scaled, self._divisor, *rows)


def opening(q: torch.Tensor, k: torch.Tensor, softcapped: bool):
    """What :class:`StatsAccumulator` starts from: ``var_q``, ``var_k`` (...,) and the moments of no
    scores yet (count, mean, squared deviations: distinct float64 zeros), the scaled ones where
    ``softcapped``."""
    heads = q.shape[:-2]

    def none_yet():
        return tuple(torch.zeros(shape, dtype=torch.float64, device=q.device) for shape in ((), heads, heads))

    return _var(q.float(), (-2, -1)), _var(k.float(), (-2, -1)), none_yet(), none_yet() if softcapped else None


def summary(var_q, var_k, moments_raw, moments_scaled, divisor, ent, ent_u, p_max, pu_max) -> dict[str, torch.Tensor]:
    """The statistics of :class:`StatsAccumulator`, from its moments and its rows' terms (..., T)."""
    n, mean_raw, m2 = moments_raw
    var_raw = (m2 / n).clamp_min(0)
    if moments_scaled is None:
        mean_scaled, var_scaled = mean_raw / divisor, var_raw / divisor**2
    else:
        mean_scaled, var_scaled = moments_scaled[1], (moments_scaled[2] / moments_scaled[0]).clamp_min(0)
    # 0 / 0 (or x / 0) where the scaled scores do not vary: undefined, NaN
    ratio = torch.where(var_scaled > 0, var_raw / var_scaled.clamp_min(1e-300), torch.full_like(var_raw, float("nan")))
    out = {
        "var_q": var_q,
        "var_k": var_k,
        "mean_scores_raw": mean_raw.float(),
        "mean_scores": mean_scaled.float(),
        "var_scores_raw": var_raw.float(),
        "var_scores": var_scaled.float(),
        "variance_ratio": ratio.float(),
        "entropy": ent.mean(-1),
        "entropy_unscaled": None if ent_u is None else ent_u.mean(-1),
        "max_weight": p_max.mean(-1),
        "max_weight_unscaled": None if pu_max is None else pu_max.mean(-1),
        "row_entropy": ent,
        "row_entropy_unscaled": ent_u,
    }
    return {name: value for name, value in out.items() if value is not None}  # without the unscaled: no such keys


PART = "merged_part"  # in a layer's extras: its rows are one block of a wider softmax (model.families.merged)
ROW_TERMS = ("ent", "ent_u", "p_max", "pu_max")  # per row: entropy and top weight, scaled and unscaled


def block_terms(
    raw, scores, pattern, mask, moments_raw, moments_scaled, divisor, from_raw: bool, softcap, sink, unscaled=True,
    part=False,
):
    """One block of :class:`StatsAccumulator`: the running moments with the block's rows merged
    (:func:`merge_rows`), and the rows' :data:`ROW_TERMS`, each (..., t).

    Each pass over a (heads, t, s) block costs as much as the attention itself, so there are
    few: the row maximum of the pattern (its weight and its key), the centred raw scores with
    the masked cells zeroed, two reductions of them, the exponential of the unscaled softmax,
    and three dot products (``Σ e``, ``Σ e·u`` and ``Σ p·(s - max s)``, from the centred raw
    scores where ``from_raw``: a divisor of at least 1 and no softcap)."""
    raw, scores, pattern = raw.float(), scores.float(), pattern.float()
    visible = mask.to(raw.dtype)  # (t, s) 1 where the query sees the key
    n_row = visible.sum(-1)  # (t,)

    p_max, top = row_max(pattern)  # (..., t) the row's largest weight and its key: the top score's
    c = raw.gather(-1, top[..., None])  # (..., t, 1) the raw score of the row's top key
    s_max = scores.gather(-1, top[..., None])[..., 0]  # (..., t)
    y = _zero_masked(raw - c, mask, visible)  # (..., t, s) centred on the top key, 0 where masked
    moments_raw = merge_rows(*moments_raw, n_row, y.sum(-1), torch.linalg.vector_norm(y, dim=-1).square(), c[..., 0])
    if moments_scaled is not None:  # softcapped: the moments of the scores themselves (-inf where masked)
        ys = torch.where(mask, scores - s_max[..., None], torch.zeros((), device=scores.device))
        moments_scaled = merge_rows(
            *moments_scaled, n_row, ys.sum(-1), torch.linalg.vector_norm(ys, dim=-1).square(), s_max
        )
        del ys

    ent_u = pu_max = None
    if unscaled:
        ent_u, pu_max = _unscaled_terms(raw, y, mask, visible, c, top, softcap, sink)
    if from_raw:
        # Σ p·(s - max s) = Σ p·(raw - c) / divisor, from the centred raw scores: 0 at the top
        # key, so that a one-hot row gives exactly 0
        p_dot = _dot_spent(y, pattern) / divisor  # (..., t); y is spent
    else:  # scores larger than the raw ones, or softcapped: the model's own scaled scores
        lowest = torch.finfo(scores.dtype).min
        p_dot = _dot(pattern, scores.clamp_min(lowest) - s_max[..., None])
    del y
    # -Σ p ln p with ln p = ln p_max + (s - max s) on every visible key; a block of a wider softmax (``part``)
    # weighs ln p_max by its own mass, less than 1
    ent = -(pattern.sum(-1) if part else 1.0) * p_max.log() - p_dot
    if sink is not None:  # the sink's share m and its score, against the top key's
        gap = sink - s_max
        ent = ent - p_max * gap.exp() * gap
    return moments_raw, moments_scaled, (ent.clamp_min(0), ent_u, p_max, pu_max)


def _unscaled_terms(raw, y, mask, visible, c, top, softcap, sink):
    """The unscaled softmax's row entropy and row maximum (..., t), from its normaliser: e = exp(u)
    with u <= 0 on the visible keys; u = 0 where masked, so e = 1 there: left out of Z by the mask,
    and of Σ e·u as 1 · 0."""
    u = y if softcap is None else _zero_masked(_capped(raw, softcap, top), mask, visible)
    e = u.exp()  # (..., t, s)
    z = _dot(e, visible)  # (..., t) >= 1: the top key contributes exp(0)
    e_u = _dot(e, u)
    if sink is not None:  # the sink's column of the unscaled softmax, against the top key's raw score
        s_u = sink - c[..., 0]  # (..., t)
        z, e_u = z + s_u.exp(), e_u + s_u.exp() * s_u
    return (z.log() - e_u / z).clamp_min(0), 1.0 / z


@functools.cache
def fused(name: str):
    """This module's function ``name`` (:func:`opening`, :func:`block_terms`, :func:`summary`)
    compiled (``torch.compile``): made once a process, compiled at its first call, and again only for
    another kind of input (one head against several, a divisor under 1, a softcap, sinks, another
    dtype); any text length, block or mask runs the same code."""
    from torch.fx.experimental import _config as shapes  # no public switch for duck sizing (torch 2.13)

    compiled = torch.compile(globals()[name], dynamic=True)
    # every size its own symbol, even where two are equal at the first call (a causal first block's
    # rows and keys, heads and rows): else the code would hold only where they are equal. One patch
    # object, entered at each call (each entry a thread's own in torch 2.13)
    distinct_sizes = shapes.patch(use_duck_shape=False)

    def fused(*args):
        with distinct_sizes:
            return compiled(*args)

    return fused


def head_stats_arrays(
    q: torch.Tensor,
    k: torch.Tensor,
    raw: torch.Tensor,
    scores: torch.Tensor,
    pattern: torch.Tensor,
    mask: torch.Tensor,
    divisor: float,
    softcap: float | None = None,
    sink_logit: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """:class:`StatsAccumulator` of whole ``(..., T, T)`` tensors at once (one block of every row)."""
    stats = StatsAccumulator(q, k, divisor, softcap, sink_logit)
    stats.add(raw, scores, pattern, mask)
    return stats.result()
