"""How many query rows a layer's explicit attention computes at once: blocks sized by a memory budget.

The blockwise sinks of :mod:`model.capture`, :mod:`model.rollout` and :mod:`model.compare` ask
:func:`query_blocks` for their blocks, with the budget of the layer's device from :func:`block_budget`;
the atlas's sink (:mod:`model.atlas.stats`) sizes its batch's blocks itself, from the same budget.
"""

from __future__ import annotations

import torch

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
