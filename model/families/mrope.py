"""Multimodal RoPE's positions in generation (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): each step's
``position_ids`` given explicitly, with the generation's own position delta kept on its cache.

An image's tokens share positions (temporal, height, width), so after an image the position of a
token is its index plus a delta (negative). transformers keeps that delta on the model module
(``rope_deltas``), set by whichever image pass ran last; a step that lets the model count its
positions reads it, so another request's image pass between two steps (or before a text-only
generation) would move this generation's positions. Here the first step takes its positions from
the model's ``get_rope_index`` (a prompt with an image) or counts them from 0 (a text prompt,
delta 0) and keeps the delta on the cache; each later step counts ``past .. past + n`` plus that
delta, the same on the three axes, as transformers' ``generate`` does for one sequence.
"""

from __future__ import annotations

import torch


def mrope_positions(trunk, idx: torch.Tensor, cache, inputs: dict) -> dict:
    """``{"position_ids": (3, 1, n)}`` for a step of the ids ``idx`` ``(1, n)`` over ``cache`` on a model
    with multimodal RoPE (its ``trunk`` has ``get_rope_index``); ``{}`` for any other model, which counts
    positions from the cache itself. ``inputs``: the step's image inputs (``image_grid_thw``,
    ``mm_token_type_ids``) on the first step of a prompt with an image."""
    rope_index = getattr(trunk, "get_rope_index", None)
    if not callable(rope_index):
        return {}
    past, n = cache.get_seq_length(), idx.shape[1]
    if past == 0 and "image_grid_thw" in inputs and "mm_token_type_ids" in inputs:
        position_ids, delta = rope_index(
            idx, mm_token_type_ids=inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"]
        )
        cache.rope_delta = delta.reshape(-1)[:1].to(idx.device)
        return {"position_ids": position_ids}
    if past == 0:
        cache.rope_delta = torch.zeros(1, dtype=torch.long, device=idx.device)
    counted = torch.arange(past, past + n, device=idx.device) + cache.rope_delta
    return {"position_ids": counted.view(1, 1, n).expand(3, 1, n)}
