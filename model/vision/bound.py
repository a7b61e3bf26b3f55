"""A :class:`~.backend.VisionBackend` with one prompt's image bound to it: the backend the model
code (rollout, head effects, the lens, attribution, knockout, generation) is handed when a
request carries an image. That code calls the backend with token ids alone; each pass here adds
the prompt's ``pixel_values`` (and what else the model reads of the processor's output).

The ids must be the prompt's own (:attr:`VisionPrompt.ids`) or a prefix of them (the model code
runs a prefix where later tokens cannot change what it reads, as in a causal text model). A prefix
runs as the whole prompt, its outputs cut to the prefix: with the image's tokens attending to each
other both ways (Gemma 3) a prefix that cut the image would change them, and a prefix before the
image would hold no image tokens for the pixels to fill. Traces in a ``sink`` cover the whole prompt.

A batch of ``B`` rows (head effects' switched-off heads) runs the vision tower once: its features
(:meth:`~.backend.VisionBackend.image_features`, the same in every row: the tower's attention is
neither recorded nor switched off) go in ``B`` times, one copy per row, in place of the pixels; the
other inputs with a row per prompt repeated ``B`` times. In
generation only the first step, which runs the whole prompt, carries it; later steps feed one new
text token over the cache, as transformers' ``generate`` does.
"""

from __future__ import annotations

import torch

from ..options import AttentionOptions


class ImageBound:
    """``backend`` with ``prompt``'s image in every pass; anything else is the backend's own."""

    def __init__(self, backend, prompt) -> None:
        self._backend = backend
        self.prompt = prompt
        self._features = None  # the image through the vision tower, once (:meth:`last_logits`)

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def _inputs(self, rows: int, without: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
        per_patch = getattr(self._backend.layout, "patch_inputs", ())
        return {
            k: v.repeat(rows, *[1] * (v.dim() - 1)) if k in per_patch else v.expand(rows, *v.shape[1:]).contiguous()
            for k, v in self.prompt.inputs.items()
            if k not in without
        }

    def _length(self, ids) -> int:
        """How many of the prompt's tokens ``ids`` are (a prefix of them); ``ValueError`` for other ids."""
        ids = list(ids)
        if not ids or ids != self.prompt.ids[: len(ids)]:
            raise ValueError("an image-bound pass runs the prompt's own token ids (or a prefix of them) only")
        return len(ids)

    def run_length(self, ids) -> int:
        """How many tokens a pass over ``ids`` runs: the whole prompt's, whatever prefix of it ``ids`` is
        (head effects size their batches by it)."""
        self._length(ids)
        return len(self.prompt.ids)

    def run(self, ids: list[int], opts: AttentionOptions, sink, logits: bool = True):
        n = self._length(ids)
        out = self._backend.run(self.prompt.ids, opts, sink, logits, image=self.prompt)
        return out[:n] if out is not None else None

    def hidden(self, ids: list[int], opts: AttentionOptions, sink) -> torch.Tensor:
        n = self._length(ids)
        return self._backend.hidden(self.prompt.ids, opts, sink, image=self.prompt)[:n]

    def last_logits(self, idx: torch.Tensor, opts: AttentionOptions) -> torch.Tensor:
        n, rows = self._length(idx[0].tolist()), len(idx)
        full = torch.tensor([self.prompt.ids], dtype=idx.dtype).expand(rows, -1)
        if self._features is None:
            self._features = self._backend.image_features(self.prompt)
        encoded = {"image": _repeated(self._features, rows)}
        inputs = self._inputs(rows, without=("pixel_values",))
        return self._backend.last_logits(full, opts, at=n - 1, mm_encoder_outputs=encoded, **inputs)

    def patterns(self, idx: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("patterns over a batch of texts: not with one prompt's image")

    def step(self, ids: list[int], cache, opts: AttentionOptions):
        if cache.get_seq_length() == 0:  # the first step: the prompt, with its image
            if self._length(ids) != len(self.prompt.ids):
                raise ValueError("generation with an image starts from the whole prompt")
            return self._backend.step(ids, cache, opts, **self._inputs(1))
        return self._backend.step(ids, cache, opts)


def _repeated(features, rows: int):
    """One image's ``get_image_features`` output as ``rows`` images one after another (the order in which
    the model fills a batch's image tokens, row by row): its ``pooler_output`` and, per layer, Qwen3-VL's
    ``deepstack_features``."""
    fields = {"pooler_output": _copies(features.pooler_output, rows)}
    deep = getattr(features, "deepstack_features", None)
    if deep is not None:
        fields["deepstack_features"] = [_copies(d, rows) for d in deep]
    return type(features)(**fields)


def _copies(x, rows: int):
    """``rows`` copies one after another of a tensor with a leading axis per image (or patch, or token),
    or of a list with an item per image."""
    if isinstance(x, (list, tuple)):
        return list(x) * rows
    return x.repeat(rows, *[1] * (x.dim() - 1))
