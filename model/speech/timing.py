"""Each target token's time, and the words', from the cross-attention of the alignment heads.

Nothing of the method is written here: transformers' own
``WhisperForConditionalGeneration._extract_token_timestamps`` normalises the alignment heads' weights,
median-filters them and runs its dynamic time warping, handed the cross-attention as generation's output
holds it (one step of every decoder position); ``_combine_tokens_into_words`` groups the tokens into words
as transformers' speech pipeline does, whose token ``i`` lasts from time ``i - 1`` to time ``i``.
"""

from __future__ import annotations

from typing import Any

import torch


def default_alignment_heads(n_layer: int, n_head: int) -> list[list[int]]:
    """openai/whisper's own default where a checkpoint names none: every head of the decoder's last half."""
    return [[layer, head] for layer in range(n_layer // 2, n_layer) for head in range(n_head)]


def alignment_mean(cross: list[torch.Tensor], heads: list[list[int]]) -> list[list[float]]:
    """The mean of the ``heads`` ([layer, head]) patterns in ``cross`` (per decoder layer,
    ``(1, n_head, T, frames)``): ``[T][frames]``, rounded to 6 decimals."""
    got = torch.stack([cross[layer][0, head].float() for layer, head in heads]).mean(dim=0)
    return torch.round(got, decimals=6).cpu().tolist()


def token_timestamps(
    model, cross: list[torch.Tensor], ids: list[int], heads: list[list[int]], prompt: int, num_frames: int,
    seconds_per_frame: float,
) -> list[float]:
    """``[len(ids)]`` seconds: transformers' ``_extract_token_timestamps`` over ``cross`` (per decoder layer,
    ``(1, n_head, len(ids), frames)``), the first ``prompt`` tokens (the decoder start and task tokens) at 0,
    cropped to the audio's own ``num_frames`` (mel frames; the encoder's are half as many). As in
    ``generate()``, whose last token is never fed back, the last position's row takes no part: the last token
    keeps the time before it, and a generated target's times are generate(return_token_timestamps=True)'s."""
    from transformers.generation.utils import GenerateEncoderDecoderOutput

    fed = tuple(c[:, :, : len(ids) - 1] for c in cross)  # (1, nh, T - 1, frames): the rows generate() has
    out = GenerateEncoderDecoderOutput(sequences=torch.tensor([ids], device=cross[0].device), cross_attentions=(fed,))
    got = type(model)._extract_token_timestamps(
        model, out, heads, time_precision=seconds_per_frame, num_frames=num_frames, num_input_ids=prompt
    )
    return [round(float(t), 4) for t in got[0, : len(ids)].tolist()]


def words_of(tokenizer, ids: list[int], times: list[float], language: str | None = None) -> list[dict[str, Any]]:
    """The target's words: ``[{"word", "start", "end", "tokens": [a, b]}]``, ``[a, b)`` the word's positions in
    ``ids``; the special tokens (start, task, end of text) belong to no word."""
    from transformers.models.whisper.tokenization_whisper import _combine_tokens_into_words

    special = set(tokenizer.all_special_ids)
    at = [i for i, t in enumerate(ids) if t not in special and t < tokenizer.eos_token_id]
    if not at:
        return []
    words, _, indices = _combine_tokens_into_words(tokenizer, [ids[i] for i in at], language)
    out = []
    for word, idx in zip(words, indices):
        a, b = at[idx[0]], at[idx[-1]] + 1
        out.append({"word": word, "start": times[a - 1] if a else 0.0, "end": times[b - 1], "tokens": [a, b]})
    return out
