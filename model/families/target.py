"""A :class:`~.seq2seq.Seq2SeqBackend` with one request's source and target bound to it, looking at one
stack: the backend the model code (head effects, rollout, the lens, ...) is handed for an
encoder-decoder. That code calls the backend with token ids alone, the ids of the answer's
``tokens``: the query side of the stack (the source for ``encoder``, the target for ``decoder`` and
``cross``), or a prefix of the target (head effects at an earlier target position); each pass here
runs the whole source and that target, records the stack looked at, and returns what the decoder
computed: its states and logits at each target position (the next-token guesses), whichever the stack.
"""

from __future__ import annotations

import torch

from ..options import AttentionOptions
from .backend import _Discard


class TargetBound:
    """``backend`` with ``source`` and ``target`` in every pass, recording ``stack``; anything else is the
    backend's own."""

    def __init__(self, backend, source: list[int], target: list[int], stack: str) -> None:
        self._backend = backend
        self.source = list(source)
        self.target = list(target)
        self.stack = stack
        self.cross_rows: list[torch.Tensor] = []  # generation: the last step's cross rows

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    @property
    def ids(self) -> list[int]:
        """The query side's ids: the answer's ``token_ids``."""
        return self.source if self.stack == "encoder" else self.target

    def _target(self, ids) -> list[int]:
        """The target a pass over ``ids`` runs: the whole one for the query side's ids, else ``ids`` where they
        are a prefix of the target (the decoder is causal: later target tokens change nothing before them)."""
        ids = list(ids)
        if ids == self.ids:
            return self.target
        if ids and ids == self.target[: len(ids)]:
            return ids
        raise ValueError("an encoder-decoder's bound pass runs its own source and target (or a prefix of it) only")

    def run_length(self, ids) -> int:
        """How many tokens a pass runs: the source's and the target's (head effects size their batches by it)."""
        return len(self.source) + len(self._target(ids))

    def hidden(self, ids: list[int], opts: AttentionOptions, sink) -> torch.Tensor:
        """The stack's calls into ``sink``; the decoder's states at each target position ``(T_target, C)``."""
        return self._backend.run_pair(self.source, self._target(ids), self.stack, opts, sink)[0]

    def run(self, ids: list[int], opts: AttentionOptions, sink, logits: bool = True) -> torch.Tensor | None:
        h = self.hidden(ids, opts, sink)
        if not logits:
            return None
        with torch.inference_mode():
            return self._backend.head(h)

    def last_logits(self, idx: torch.Tensor, opts: AttentionOptions, at: int = -1) -> torch.Tensor:
        """``idx`` (B, T) rows of the same ids (:meth:`_target`) -> the decoder's logits ``(B, V)`` at target
        position ``at`` of the target they run, float32."""
        target = self._target(idx[0].tolist())
        h = self._backend.run_pair(self.source, target, self.stack, opts, _Discard(), rows=len(idx))
        with torch.inference_mode():
            return self._backend.head(h[:, at]).float()

    def start_generation(self) -> dict:
        return self._backend.start_generation()

    def step(self, ids: list[int], state: dict, opts: AttentionOptions) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Generation (:func:`model.ablation.generate`): the new target tokens -> the logits after the last
        ``(V,)`` and each decoder layer's row of it; each cross layer's row over the source is kept in
        :attr:`cross_rows` (L × (nh, S)) for the caller's line."""
        logits, rows, self.cross_rows = self._backend.step_pair(self.source, ids, state, opts)
        return logits, rows

    def patterns(self, idx: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("patterns over a batch of texts: not with one source and target")
