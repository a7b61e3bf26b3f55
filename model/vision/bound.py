"""A :class:`~.backend.VisionBackend` with one prompt's image bound to it: the backend the model
code (rollout, head effects, the lens, attribution, knockout, generation) is handed when a
request carries an image. That code calls the backend with token ids alone; each pass here adds
the prompt's ``pixel_values`` (and what else the model reads of the processor's output), so the
ids must be the prompt's own (:attr:`VisionPrompt.ids`).

A batch of ``B`` rows (head effects' switched-off heads) carries the image ``B`` times. In
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

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def _inputs(self, rows: int) -> dict[str, torch.Tensor]:
        return {k: v.expand(rows, *v.shape[1:]) for k, v in self.prompt.inputs.items()}

    def _check(self, ids) -> None:
        if list(ids) != self.prompt.ids:
            raise ValueError("an image-bound pass runs the prompt's own token ids only")

    def run(self, ids: list[int], opts: AttentionOptions, sink, logits: bool = True):
        self._check(ids)
        return self._backend.run(ids, opts, sink, logits, image=self.prompt)

    def hidden(self, ids: list[int], opts: AttentionOptions, sink) -> torch.Tensor:
        self._check(ids)
        return self._backend.hidden(ids, opts, sink, image=self.prompt)

    def last_logits(self, idx: torch.Tensor, opts: AttentionOptions) -> torch.Tensor:
        self._check(idx[0].tolist())
        return self._backend.last_logits(idx, opts, **self._inputs(len(idx)))

    def patterns(self, idx: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("patterns over a batch of texts: not with one prompt's image")

    def step(self, ids: list[int], cache, opts: AttentionOptions):
        if cache.get_seq_length() == 0:  # the first step: the prompt, with its image
            self._check(ids)
            return self._backend.step(ids, cache, opts, **self._inputs(1))
        return self._backend.step(ids, cache, opts)
