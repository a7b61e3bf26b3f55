"""Whisper (and Distil-Whisper): an encoder–decoder whose source is a recording.

:class:`WhisperBackend` is :class:`~attnscope.model.families.seq2seq.Seq2SeqBackend` with the parts that
differ overridden: the encoder reads the log-mel features of the model's own ``WhisperFeatureExtractor``
(:class:`~.features.Ear`), not ids; the source's "tokens" are the encoder's 1,500 frames (0.02 s each);
the target starts with the task tokens ``generate()`` puts first (``_retrieve_init_tokens``: the decoder
start, the language, detected where the model is multilingual and none is set, the task and
``<|notimestamps|>``); the model's own target is ``generate()``'s, greedy. A request's recording is bound
by :meth:`WhisperBackend.hearing`, a copy of the backend sharing the model.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from ..families.seq2seq import MAX_NEW_TOKENS, Seq2SeqBackend
from ..options import AttentionOptions
from ..ours.checkpoint import CheckpointError
from ..ours.tokenizer import BPETokenizer
from .features import Ear, Heard
from .timing import alignment_mean, default_alignment_heads, token_timestamps, words_of


class WhisperBackend(Seq2SeqBackend):
    """A transformers ``AutoModelForSpeechSeq2Seq`` (Whisper) with every attention call recorded into its stack."""

    auto_class = "AutoModelForSpeechSeq2Seq"

    def __init__(self, model: torch.nn.Module, tokenizer: BPETokenizer, device: torch.device, name: str):
        self.heard: Heard | None = None  # the bound recording (hearing); none: the load-time probes hear silence
        super().__init__(model, tokenizer, device, name)
        cfg = model.config
        self.frames = int(cfg.max_source_positions)
        self.target_limit = int(cfg.max_target_positions)  # the decoder's context, in tokens
        self.facts.block_size = max(self.frames, self.target_limit)  # the longer side: the encoder's frames
        self.ear: Ear | None = None  # set by load_speech_dir from the folder's feature extractor
        self.hf_tokenizer = None  # transformers' WhisperTokenizer: the words, as its pipeline groups them
        named = getattr(model.generation_config, "alignment_heads", None)
        self.named_heads = [[int(a), int(b)] for a, b in named] if named else None  # /api/model alignment_heads
        cross = next(s for s in self.facts.stacks if s["name"] == "cross")
        self.alignment_heads = self.named_heads or default_alignment_heads(cross["n_layer"], cross["n_head"])

    @classmethod
    def tokenizer_of(cls, path: Path, cfg) -> BPETokenizer:
        """The folder's tokenizer.json without its template: the task tokens are the generation config's."""
        return BPETokenizer.load(path / "tokenizer.json")

    # ------------------------------------------------------------ the recording

    def hearing(self, heard: Heard) -> WhisperBackend:
        """This backend with ``heard`` as the source of every pass, and the task tokens generate() puts first."""
        bound = copy.copy(self)
        bound.heard = heard
        gen = copy.deepcopy(self.model.generation_config)
        gen.return_timestamps = False
        with torch.inference_mode():
            window = heard.features.shape[-1]
            init = self.model._retrieve_init_tokens(heard.features, 1, gen, self.model.config, window, {})
        bound.start_ids = [int(t) for t in init[0].tolist()]
        return bound

    def source_ids(self) -> list[int]:
        """The source's "ids": the encoder's frame numbers (its tokens are their times)."""
        return list(range(self.frames))

    def read_target(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """``text`` teacher-forced after the task tokens, ended by the end of text as generate() ends a transcript
        (so that its last word is timed too); its tokens' character ranges (the specials': empty)."""
        ids, offsets = super().read_target(text)
        end = int(self.model.generation_config.eos_token_id)
        return ids + [end], offsets + [(len(text), len(text))]

    # ------------------------------------------------------------ Seq2SeqBackend's parts

    def source_input(self, source: list[int], rows: int = 1) -> torch.Tensor:
        """The bound recording's features ``(rows, mel bins, window)`` (silence when none is bound): the source's
        ids are its frames' numbers."""
        return self._features().expand(rows, -1, -1)

    def encode(self, source: torch.Tensor) -> torch.Tensor:
        """Features ``(B, mel bins, window)`` through the encoder -> ``(B, frames, C)``; ids ``(B, S)`` (the head
        roles' probe of the decoder) stand for the bound features."""
        if not source.is_floating_point():
            source = self.source_input([], source.shape[0])
        return self.model.get_encoder()(input_features=source).last_hidden_state

    def _features(self) -> torch.Tensor:
        if self.heard is not None:
            return self.heard.features
        cfg = self.model.config
        dtype = next(self.model.parameters()).dtype
        return torch.zeros(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, dtype=dtype, device=self.device)

    @torch.inference_mode()
    def write(self, source: list[int], max_new_tokens: int = MAX_NEW_TOKENS) -> list[int]:
        """generate()'s greedy transcript of the bound recording, its task tokens first."""
        heard = self.heard
        mask = torch.ones(1, heard.features.shape[-1], dtype=torch.long, device=self.device)
        mask[:, heard.num_frames :] = 0
        out = self.model.generate(
            input_features=heard.features, attention_mask=mask, do_sample=False, num_beams=1,
            max_new_tokens=max_new_tokens, return_timestamps=False,
        )
        return self.decoder_start() + [int(t) for t in out[0].tolist()]

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return self.model.get_output_embeddings()(h)

    # ------------------------------------------------------------ the words' times

    def timing(
        self, target: list[int], opts: AttentionOptions | None = None, mean: bool = False
    ) -> tuple[list[float], list[dict], list[list[float]] | None]:
        """``token_timestamps`` and ``words`` of ``target`` over the bound recording, from one pass recording the
        cross stack (with ``opts``: its switched-off heads, to see whether the timing survives without them);
        with ``mean``, also the alignment heads' mean cross pattern ``[target][frame]`` of the same pass."""
        sink = _CrossPatterns()
        self.run_pair(self.source_ids(), target, "cross", opts or AttentionOptions(), sink)
        times = token_timestamps(
            self.model, list(sink), target, self.alignment_heads, len(self.decoder_start()), self.heard.num_frames,
            self.ear.seconds_per_frame,
        )
        averaged = alignment_mean(list(sink), self.alignment_heads) if mean else None
        return times, words_of(self.hf_tokenizer, target, times), averaged


class _CrossPatterns(list):
    """A sink keeping each cross layer's whole pattern (1, nh, T, frames): the target is short."""

    needs_unscaled = False

    def append(self, trace) -> None:
        super().append(trace.pattern.float())


def load_speech_dir(path: Path, device: torch.device, dtype: str = "fp32", placement=None) -> WhisperBackend:
    """Open a local Whisper folder offline, with its feature extractor and tokenizer; :class:`CheckpointError`
    on anything it cannot show."""
    from ..families.backend import load_transformers_dir

    backend = load_transformers_dir(path, device, dtype, placement, kind=WhisperBackend)
    try:
        from transformers import AutoFeatureExtractor, AutoTokenizer

        extractor = AutoFeatureExtractor.from_pretrained(path, local_files_only=True)
        backend.hf_tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        why = " ".join(str(e).split())[:200]
        raise CheckpointError(f"{path.name}: no feature extractor beside the model ({why})") from e
    backend.ear = Ear(extractor, backend.frames)
    return backend
