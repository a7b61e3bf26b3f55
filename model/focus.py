"""The focus head of a :class:`~model.capture.Capture`: one head of one layer kept beside the selection.

A view that looks at one head closely (the head view) asks for it as the request's ``focus``. Its
fields come at full resolution, max-pooled to at most n×n (``focus_thumbnail``: a text too long for
one cell per token) and/or as the exact cells of one region ``[q0, q1) × [k0, k1)``
(``focus_region``: a zoom into the pooled picture). :class:`FocusHead` holds the head's
accumulators on the layer's device and fills them a block of query rows at a time, as the capture
hands it each block; :meth:`FocusHead.results` names what the capture then moves to the host.
"""

from __future__ import annotations

import torch

from .blocks import blank, head_index, pick, shown, softmax_of, thumbnailed, write_block
from .fields import PART_FIELDS, ROW_FIELDS, VECTOR_FIELDS, kept_beside, matrices_kept
from .pooling import Pool, pool_fill, pooled_input, thumbnail_block, unfill
from .stats import StatsAccumulator


class FocusHead:
    """Head ``head`` of one layer: ``q, k, v`` ``(nh, T|S, hs)``, ``mask`` ``(T, S)`` bool, ``extras`` the
    steps only some layers compute that this one does; ``fields`` what is asked of the head,
    ``thumbnail`` its pooled size (None: not pooled), ``region`` ``(q0, q1, k0, k1)`` (None: none)."""

    def __init__(
        self,
        head: int,
        q,
        k,
        v,
        mask: torch.Tensor,
        divisor: float,
        softcap=None,
        sink_logit=None,
        extras=frozenset(),
        *,
        fields: frozenset[str],
        thumbnail: int | None = None,
        region: tuple[int, int, int, int] | None = None,
        fuse: bool = False,
    ) -> None:
        T, S = mask.shape
        device = q.device
        self.index = head_index([head], -1, device)
        self.bounds = region
        names = matrices_kept(fields, extras)
        parts = kept_beside(PART_FIELDS, fields, extras)
        self.full: dict[str, torch.Tensor] = {}  # name -> (1, T, S), (1, T) or (1, 2, T, S)
        self.pools: dict[str, Pool] = {}
        self.region: dict[str, torch.Tensor] = {}  # name -> (1, q1 - q0, k1 - k0)
        if thumbnail:
            kf = thumbnail_block(T, thumbnail, S)
            # a differential pair's signed pattern starts from -inf: a max from 0 would hide its negative cells
            signed = "pattern_parts" in extras
            fill = {n: float("-inf") if signed and n == "pattern" else pool_fill(n) for n in names}
            self.pools = {n: Pool(1, T, S, kf, device, fill[n]) for n in names}
            self.pools.update({n: Pool(2, T, S, kf, device) for n in parts})
        if region is not None:
            q0, q1, k0, k1 = region
            self.region = {n: blank(n, 1, q1 - q0, k1 - k0, device) for n in names}
        if not thumbnail and region is None:
            self.full = {n: blank(n, 1, T, S, device) for n in names}
            self.full.update({n: torch.zeros(1, T, device=device) for n in kept_beside(ROW_FIELDS, fields, extras)})
            self.full.update({n: torch.zeros(1, 2, T, S, device=device) for n in parts})
        steps = {"q": q, "k": k, "v": v}
        self.vectors = {name: pick(steps[name], self.index)[0] for name in fields & set(VECTOR_FIELDS)}
        self.stats: StatsAccumulator | None = None
        if "stats" in fields:
            sink = None if sink_logit is None else pick(sink_logit, self.index)
            qk = pick(q, self.index), pick(k, self.index)
            self.stats = StatsAccumulator(*qk, divisor, softcap, sink, fuse=fuse, shifted="position_bias" in extras)

    def block(self, q0: int, q1: int, steps: dict[str, torch.Tensor | None], mask: torch.Tensor) -> None:
        """Rows ``q0 .. q1`` of the layer's named steps ``(1, nh, q1 - q0, s)``; ``mask`` the block's ``(t, s)``."""
        s = mask.shape[-1]
        masked = ~mask
        one = {n: pick(t[0], self.index) for n, t in steps.items() if t is not None}  # (1, t, s)
        if self.stats is not None:
            self.stats.add(one["attn_scores_raw"], one["attn_scores"], softmax_of(one), mask)
        for name, pool in self.pools.items():
            if name in PART_FIELDS:
                rows = one[name][0]  # (2, t, s): the pair's two softmaxes
            else:  # a differential pair's signed pattern pools as |pattern| (block maxima of a signed map mislead)
                rows = thumbnailed(one) if name == "pattern" and pool.k > 1 else one[name]
            pool.add(pooled_input(name, rows, masked), q0)
        write_block(self.full, one, q0, q1, s, masked)
        if self.region:
            r0, r1, c0, c1 = self.bounds
            a, b = max(q0, r0), min(q1, r1)
            if a < b and c0 < s:
                for name, out in self.region.items():
                    piece = shown(
                        name, one[name][:, a - q0 : b - q0, c0 : min(c1, s)], masked[a - q0 : b - q0, c0 : min(c1, s)]
                    )
                    out[:, a - r0 : b - r0, : piece.shape[-1]] = piece

    def results(self) -> list[tuple[str, str, torch.Tensor]]:
        """What the head kept, on the device, as ``(kind, name, tensor)``: kind ``focus`` (full
        resolution and q/k/v), ``focus_pooled``, ``focus_region`` or ``focus_stats``."""
        out = [("focus", name, t) for name, t in self.vectors.items()]
        out += [("focus", name, t[0]) for name, t in self.full.items()]
        for name, pool in self.pools.items():
            acc = pool.acc if name in PART_FIELDS else unfill(name, pool.acc[0])
            if name == "pattern":  # cells no block wrote (past a causal block's last key): weight 0
                acc = acc.nan_to_num(neginf=0.0)
            out.append(("focus_pooled", name, acc))
        out += [("focus_region", name, t[0]) for name, t in self.region.items()]
        if self.stats is not None:
            out += [("focus_stats", name, value[0]) for name, value in self.stats.result().items()]
        return out
