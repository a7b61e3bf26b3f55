"""The residual stream between blocks, read and written, and the logit lens over it.

Every block of either backend (our GPT's ``Block``, a transformers decoder layer) gets, once per
model, a forward hook on its output and the first block a forward pre-hook on its input. The hooks
do nothing unless a *tap* is running in this context (:func:`tapping`, a context variable, so
concurrent requests on one model never see each other's): a tap may keep the residual stream
entering the first block (after the embeddings) and after each block, and may replace a block's
output (activation patching, :mod:`.patching`).

:func:`lens` is the logit lens: the final norm and the unembedding (with whatever the model applies
after its LM head, Gemma 2's final softcap included: :meth:`Backend.head`) applied to the residual
stream after the embeddings and after each block. The last entry is the model's own prediction.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from dataclasses import dataclass

import torch

from ..backends import Backend, OursBackend, top_logits
from ..options import AttentionOptions
from ..precision import exact_fp32

FINAL_NORMS = ("norm", "ln_f", "final_layernorm", "final_layer_norm", "final_norm")  # a decoder's last norm


class Unsupported(ValueError):
    """What a causal analysis cannot do exactly on this model; the message names it."""


def blocks_and_norm(backend: Backend) -> tuple[torch.nn.ModuleList, torch.nn.Module]:
    """The model's blocks (decoder layers; an encoder's layers) in order, and the norm between the last one and
    the LM head."""
    if isinstance(backend, OursBackend):
        tr = backend.model.transformer
        return tr.h, tr.ln_f
    if hasattr(backend, "residual_blocks"):  # an encoder says where its layers are (model.families.encoder)
        found = backend.residual_blocks()
        if found is None:
            raise Unsupported(f"the layers of this {backend.facts.family} model are one module used again and again: "
                              "a layer's output cannot be told from another's")
        return found
    trunk = getattr(backend, "decoder", backend.trunk)
    blocks = next(
        (m for m in (getattr(trunk, n, None) for n in ("layers", "h")) if isinstance(m, torch.nn.ModuleList)), None
    )
    norm = next((getattr(trunk, n) for n in FINAL_NORMS if isinstance(getattr(trunk, n, None), torch.nn.Module)), None)
    if blocks is None or norm is None:
        raise Unsupported(f"cannot find the decoder layers and the final norm of this {backend.facts.family} model")
    return blocks, norm


class Tap:
    """What a forward pass does with the residual stream: keep it (``keep``), replace a block's output (``patch``)."""

    keep = False

    def __init__(self) -> None:
        self.stream: list[torch.Tensor] = []  # after the embeddings, then after each block: (B, T, C) each

    def entering(self, x: torch.Tensor) -> None:
        if self.keep:
            self.stream.append(x)

    def after(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(layer, x)
        if self.keep:
            self.stream.append(x)
        return x

    def patch(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        return x


_TAP: contextvars.ContextVar[Tap | None] = contextvars.ContextVar("attnscope_residual_tap", default=None)
_LOCK = threading.Lock()


def _hidden_of(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _install(blocks: torch.nn.ModuleList) -> None:
    """The hooks, once per model: they act only while a :func:`tapping` runs in the calling context."""
    with _LOCK:
        if getattr(blocks, "_attnscope_tapped", False):
            return

        def entering(module, args, kwargs):
            tap = _TAP.get()
            if tap is not None:
                tap.entering(_hidden_of(args, kwargs))

        def after(module, args, output, layer: int):
            tap = _TAP.get()
            if tap is None:
                return None
            if isinstance(output, tuple):  # (hidden_states, ...) in older decoder layers
                return (tap.after(layer, output[0]), *output[1:])
            return tap.after(layer, output)

        blocks[0].register_forward_pre_hook(entering, with_kwargs=True)
        for i, block in enumerate(blocks):
            block.register_forward_hook(lambda m, a, o, i=i: after(m, a, o, i))
        blocks._attnscope_tapped = True


@contextlib.contextmanager
def tapping(backend: Backend, tap: Tap):
    """Within this block, this context's forward passes of ``backend`` go through ``tap``."""
    blocks, _ = blocks_and_norm(backend)
    _install(blocks)
    token = _TAP.set(tap)
    try:
        yield tap
    finally:
        _TAP.reset(token)


def residual_stream(backend: Backend, ids: list[int], opts: AttentionOptions = AttentionOptions()) -> torch.Tensor:
    """``(L + 1, T, C)``: the residual stream after the embeddings and after each block of one pass."""
    tap = Tap()
    tap.keep = True
    with tapping(backend, tap):
        backend.hidden(ids, opts, None)
    return torch.stack([x[0] for x in tap.stream])


@dataclass
class Lens:
    values: torch.Tensor  # (L + 1, T, k) the top logits after the embeddings and after each block
    indices: torch.Tensor  # (L + 1, T, k) their token ids
    lse: torch.Tensor  # (L + 1, T) float64 logsumexp of all the logits there


@torch.inference_mode()
@exact_fp32()
def lens(backend: Backend, ids: list[int], k: int, opts: AttentionOptions = AttentionOptions()) -> Lens:
    """The final norm and the LM head over the residual stream after the embeddings and after each block."""
    stream = residual_stream(backend, ids, opts)  # (L + 1, T, C)
    _, norm = blocks_and_norm(backend)
    parts = [top_logits(backend, norm(x), k, 1.0) for x in stream]  # (T, k), (T, k), (T,) each
    values, indices, lse = (torch.stack(p) for p in zip(*parts))
    return Lens(values=values, indices=indices, lse=lse)
