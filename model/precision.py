"""fp32 means fp32 while attnscope shows numbers; TF32 only inside training.

On Ampere and newer GPUs a float32 matmul may run in TF32 (a 10-bit mantissa) when
``torch.set_float32_matmul_precision("high")`` is in force: fine for training, not for a tool
whose promise is that the page shows what the model computed (patterns off by 4e-3, bf16-like).
Every forward pass that attnscope shows runs under :func:`exact_fp32`; the trainer turns TF32
on for its own loop only (:func:`tf32_for_training`) and puts the setting back afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def _matmul_precision(precision: str) -> Iterator[None]:
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def exact_fp32():
    """Context manager and decorator: float32 matmuls in full float32 ("highest"), whatever the
    process had set, restored on the way out."""
    return _matmul_precision("highest")


def tf32_for_training(device: str | torch.device):
    """TF32 matmuls for a training loop on CUDA ("high"), restored on the way out; nothing on the CPU."""
    if torch.device(device).type == "cuda":
        return _matmul_precision("high")
    return contextlib.nullcontext()
