"""Two models' attention on the same token ids, compared head by head, a block of query rows at a time.

Model A runs first with a :class:`KeepSteps` sink: each attention layer computes its output a block
of rows at a time as under a :class:`~model.capture.Capture`, and the sink keeps only the layer's
``steps`` function (:func:`model.trace.traced_attention`), which holds that layer's ``q``, ``k`` and
``v`` (what a KV cache holds, no ``(nh, T, S)`` tensor). Model B then runs with a :class:`Divergence`
sink: for each block of B's rows it asks A's steps for the same rows and reduces the two blocks of
patterns at once, per head:

* ``divergence``: the Jensen–Shannon divergence of the two rows, in bits, summed over the rows
  (the mean over queries at the end): ``½ Σ_j p_j log₂(p_j / m_j) + ½ Σ_j q_j log₂(q_j / m_j)``,
  ``m = (p + q) / 2``, with ``0 · log 0 = 0``; between 0 and 1; exactly 0 where the rows are equal;
* ``max_abs``: the largest ``|p_j − q_j|`` of any row;
* ``argmax_agreement``: the share of rows whose heaviest key is the same (the first one on a tie).

The chosen head's two patterns are kept whole, ``(T, T)`` each. Each layer's results come back
to the CPU, wherever the layer's weights sit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .blocks import block_budget, query_blocks
from .options import AttentionOptions


class KeepSteps:
    """A blockwise sink that keeps each attention layer's ``steps`` function and nothing else."""

    blockwise = True
    needs_unscaled = False

    def __init__(self) -> None:
        self.steps: dict[int, Callable[[int, int, int], dict]] = {}
        self._device = torch.device("cpu")

    def wants(self, layer: int) -> bool:
        return True

    def keep_steps(self, layer: int, steps) -> None:
        self.steps[layer] = steps

    def blocks(self, T: int, S: int, nh: int) -> list[tuple[int, int]]:
        return query_blocks(T, S, nh, block_budget(self._device))

    def begin(self, layer: int, q, *args, **kwargs) -> None:
        self._device = q.device

    def block(self, q0: int, q1: int, steps: dict) -> None:
        pass

    def end(self, z: torch.Tensor) -> None:
        pass


@dataclass
class _Layer:
    steps_a: Callable[[int, int, int], dict]
    T: int
    js: torch.Tensor  # (nh,) float64: Σ over rows of the JS divergence, bits
    max_abs: torch.Tensor  # (nh,)
    agree: torch.Tensor  # (nh,) int64: rows whose heaviest key is the same


class Divergence:
    """A blockwise sink for model B: each block of its rows against the same rows of model A
    (``kept``: A's :class:`KeepSteps`). ``focus``: the (layer, head) whose two patterns are kept."""

    blockwise = True
    needs_unscaled = False

    def __init__(self, kept: KeepSteps, focus: tuple[int, int]) -> None:
        self.kept = kept
        self.focus = focus
        self.results: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # layer -> (js, max_abs, agreement)
        self.a: np.ndarray | None = None
        self.b: np.ndarray | None = None
        self.mask: np.ndarray | None = None  # (T, S) bool: the focus layer's mask (True = may attend)
        self._layer: _Layer | None = None
        self._device = torch.device("cpu")
        self._number = -1
        self._focus_a: torch.Tensor | None = None
        self._focus_b: torch.Tensor | None = None

    def wants(self, layer: int) -> bool:
        return True

    def blocks(self, T: int, S: int, nh: int) -> list[tuple[int, int]]:
        return query_blocks(T, S, nh, block_budget(self._device))

    def begin(self, layer: int, q, k, v, mask, *args, **kwargs) -> None:
        self._device = q.device
        nh = q.shape[1]
        T, S = mask.shape
        zeros = torch.zeros(nh, dtype=torch.float64)
        self._number = layer
        self._layer = _Layer(
            self.kept.steps[layer], T, zeros.clone(), zeros.clone(), torch.zeros(nh, dtype=torch.int64)
        )
        if self.focus[0] == layer:
            self.mask = mask.bool().cpu().numpy()
            self._focus_a = torch.zeros(T, S)
            self._focus_b = torch.zeros(T, S)

    def block(self, q0: int, q1: int, steps: dict) -> None:
        st = self._layer
        pb = steps["pattern"][0]  # (nh, t, s)
        s = pb.shape[-1]
        pa = st.steps_a(q0, q1, s)["pattern"][0].to(pb.device)  # (nh, t, s): model A's same rows
        pa, pb = pa.float(), pb.float()
        st.js += js_bits(pa, pb).sum(-1).double().cpu()
        st.max_abs = torch.maximum(st.max_abs, (pa - pb).abs().amax(dim=(-2, -1)).double().cpu())
        st.agree += (pa.argmax(-1) == pb.argmax(-1)).sum(-1).cpu()
        if self._focus_a is not None:
            h = self.focus[1]
            self._focus_a[q0:q1, :s] = pa[h].cpu()
            self._focus_b[q0:q1, :s] = pb[h].cpu()

    def end(self, z: torch.Tensor) -> None:
        st, self._layer = self._layer, None
        self.results[self._number] = (
            (st.js / st.T).numpy(),
            st.max_abs.numpy(),
            (st.agree.double() / st.T).numpy(),
        )
        if self._focus_a is not None:
            self.a, self.b = self._focus_a.numpy(), self._focus_b.numpy()
            self._focus_a = self._focus_b = None


def js_bits(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The Jensen–Shannon divergence of rows ``p`` and ``q`` (..., s), in bits: (...); never below 0
    (nearly equal float32 rows would otherwise round to as little as -1e-7), exactly 0 where p = q."""
    m = (p + q) / 2
    xlogy = torch.special.xlogy
    kl_p = (xlogy(p, p) - xlogy(p, m)).sum(-1)
    kl_q = (xlogy(q, q) - xlogy(q, m)).sum(-1)
    return ((kl_p + kl_q) / (2 * np.log(2))).clamp_min(0)


@dataclass
class Comparison:
    """Per attention layer (the model's own numbers): per-head arrays; the focus head's two patterns."""

    divergence: dict[int, np.ndarray]
    max_abs: dict[int, np.ndarray]
    argmax_agreement: dict[int, np.ndarray]
    a: np.ndarray
    b: np.ndarray
    mask: np.ndarray  # (T, S) bool: the focus layer's mask in model B's pass (True = may attend)


def compare(backend_a, backend_b, ids: list[int], focus: tuple[int, int]) -> Comparison:
    """Both models on ``ids``: A's steps kept, then B's pass reduced against them block by block."""
    kept = KeepSteps()
    backend_a.run(ids, AttentionOptions(), kept, logits=False)
    sink = Divergence(kept, focus)
    backend_b.run(ids, AttentionOptions(), sink, logits=False)
    return Comparison(
        divergence={n: r[0] for n, r in sink.results.items()},
        max_abs={n: r[1] for n, r in sink.results.items()},
        argmax_agreement={n: r[2] for n, r in sink.results.items()},
        a=sink.a,
        b=sink.b,
        mask=sink.mask,
    )
