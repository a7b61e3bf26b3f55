"""How many query rows a layer's explicit attention computes at once: blocks sized by a memory budget,
and how a block's rows are kept.

The blockwise sinks of :mod:`model.capture`, :mod:`model.rollout` and :mod:`model.compare` ask
:func:`query_blocks` for their blocks, with the budget of the layer's device from :func:`block_budget`;
the atlas's sink (:mod:`model.atlas.stats`) sizes its batch's blocks itself, from the same budget.
The capture's selected heads and its focus head (:mod:`model.focus`) keep a block alike: the heads
picked (:func:`pick`), its rows written into full-size matrices as the answer shows them
(:func:`write_block`: scores NaN where masked, weights as they are).
"""

from __future__ import annotations

import torch

from .fields import PART_FIELDS, ROW_FIELDS, SCORE_FIELDS

BLOCK_BUDGET_BYTES = 96 << 20  # on the CPU: the T×S temporaries of one block of query rows, all heads of a layer
BLOCK_TEMPORARIES = 8  # float32 (nh, t, S) tensors alive at once in a block (scores, pattern, stats)
GPU_BUDGET_MAX_BYTES = 2 << 30  # on a GPU: an eighth of its free memory, up to this


def block_budget(device: torch.device, cpu_bytes: int = BLOCK_BUDGET_BYTES) -> int:
    """The bytes one block's temporaries may take on ``device``.

    On the CPU ``cpu_bytes``: a block that stays in cache runs fastest there. On a GPU an eighth of
    its free memory, up to :data:`GPU_BUDGET_MAX_BYTES` and never less than ``cpu_bytes``: a block
    costs the same kernel launches whatever its size, and small ones leave the GPU waiting on the
    host (SmolLM2 at 4,096 tokens ran 49 blocks a layer at 96 MiB, and its page request took 15×
    the forward pass on an H100).
    """
    if device.type != "cuda":
        return cpu_bytes
    free, _total = torch.cuda.mem_get_info(device)
    return max(cpu_bytes, min(GPU_BUDGET_MAX_BYTES, free // 8))


def query_blocks(T: int, S: int, nh: int, budget: int, temporaries: int = BLOCK_TEMPORARIES) -> list[tuple[int, int]]:
    """The query blocks ``[(q0, q1), ...]`` of ``T`` rows over ``S`` keys whose ``temporaries`` float32
    ``(nh, rows, S)`` tensors fit in ``budget`` bytes (one row at least)."""
    rows = max(1, budget // (nh * S * 4 * temporaries))
    return [(q0, min(T, q0 + rows)) for q0 in range(0, T, rows)]


def head_index(heads: list[int], nh: int, device) -> torch.Tensor | None:
    """The heads as an index tensor, or None when they are all heads in order (then no copy)."""
    return None if heads == list(range(nh)) else torch.tensor(heads, dtype=torch.long, device=device)


def pick(x: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """(nh, ...) -> (H, ...): the selected heads."""
    return x if index is None else x.index_select(0, index)


def softmax_of(steps: dict[str, torch.Tensor]) -> torch.Tensor:
    """The softmax the statistics describe: the pattern, or a differential pair's first softmax."""
    parts = steps.get("pattern_parts")
    return steps["pattern"] if parts is None else parts[:, 0]


def thumbnailed(steps: dict[str, torch.Tensor]) -> torch.Tensor:
    """What a thumbnail max-pools: the pattern, or a differential pair's |pattern| (it can be negative)."""
    return steps["pattern"] if steps.get("pattern_parts") is None else steps["pattern"].abs()


def write_block(full: dict, block: dict, q0: int, q1: int, s: int, masked: torch.Tensor) -> None:
    """Each full-size matrix of ``full`` (name -> tensor) gets its rows ``q0:q1`` (keys ``:s``) from ``block``."""
    for name, out in full.items():
        if name in ROW_FIELDS:
            out[:, q0:q1] = block[name].float()
        elif name in PART_FIELDS:
            out[:, :, q0:q1, :s] = block[name].float()
        else:
            out[:, q0:q1, :s] = shown(name, block[name], masked)


def blank(name: str, H: int, T: int, S: int, device) -> torch.Tensor:
    """What a matrix holds where no block wrote: NaN for scores (masked), 0 for weights."""
    return torch.full((H, T, S), float("nan") if name in SCORE_FIELDS else 0.0, device=device)


def shown(name: str, x: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """A block of a matrix as the answer shows it: scores NaN where masked, weights as they are.
    The NaNs come from adding a (t, s) bias of 0 and NaN: ``masked_fill`` with a mask broadcast
    over the heads is 8× slower on the CPU (torch 2.13)."""
    x = x.float()
    if name not in SCORE_FIELDS:
        return x
    return x + torch.zeros(masked.shape, device=x.device).masked_fill_(masked, float("nan"))
