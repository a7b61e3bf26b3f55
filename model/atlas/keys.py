"""An exemplar's ranking key: a float32 value as an int32 whose integer order is the float order, so
that a value and its row pack into one int64 that ``topk`` ranks (:class:`model.atlas.stats.AtlasSink`)."""

from __future__ import annotations

import numpy as np
import torch


def sortable(values: torch.Tensor) -> torch.Tensor:
    """float32 -> int32 whose integer order is the float order (negative floats' bits flipped)."""
    bits = values.contiguous().view(torch.int32)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def unsortable(keys: np.ndarray) -> np.ndarray:
    """The inverse of :func:`sortable`, on the host: int32 keys -> float32 values."""
    keys = keys.astype(np.int32)
    return np.where(keys < 0, keys ^ 0x7FFFFFFF, keys).astype(np.int32).view(np.float32)
