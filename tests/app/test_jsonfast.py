"""The fast writer of attention patterns parses to the rounded weights, for every mask shape."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from attnscope.app.jsonfast import layout, visible_prefix, weight_matrices


def softmax_rows(H: int, T: int, mask: np.ndarray, seed: int, spread: float = 3.0) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    scores = spread * torch.randn(H, T, T, generator=g)
    scores = scores.masked_fill(~torch.from_numpy(mask), float("-inf"))
    return torch.softmax(scores, -1).numpy()


@pytest.mark.parametrize("T", [1, 2, 3, 17, 64])
@pytest.mark.parametrize("causal", [True, False])
def test_parses_to_the_weights_rounded(T, causal):
    full = np.ones((T, T), dtype=bool)
    mask = np.tril(full) if causal else full
    weights = softmax_rows(3, T, mask, seed=T)
    out = weight_matrices(weights, mask)
    assert len(out) == 3
    for h, text in enumerate(out):
        back = np.asarray(json.loads(text), dtype=np.float64)
        assert back.shape == (T, T)
        assert np.abs(back - weights[h]).max() <= 5.1e-6  # rounded to 5 decimals
        assert (back[~mask] == 0).all()
        assert np.abs(back.sum(-1) - 1).max() <= T * 5.1e-6


def test_exact_values_and_layout():
    mask = np.tril(np.ones((3, 3), dtype=bool))
    weights = np.array([[[1.0, 0, 0], [0.25, 0.75, 0], [0.123454, 0.123456, 0.75309]]], dtype=np.float32)
    (text,) = weight_matrices(weights, mask)
    assert text == b"[[1.00000,0,0],[0.25000,0.75000,0],[0.12345,0.12346,0.75309]]"


def test_masked_tail_is_short_zeros_and_visible_zeros_are_numbers():
    mask = np.tril(np.ones((4, 4), dtype=bool))
    weights = np.zeros((1, 4, 4), dtype=np.float32)
    weights[0, :, 0] = 1.0
    (text,) = weight_matrices(weights, mask)
    assert (
        text == b"[[1.00000,0,0,0],[1.00000,0.00000,0,0],[1.00000,0.00000,0.00000,0],[1.00000,0.00000,0.00000,0.00000]]"
    )


def test_a_mask_that_is_not_a_prefix_is_written_in_full():
    mask = np.array([[True, False], [False, True]])
    assert visible_prefix(mask) is None
    weights = np.array([[[1.0, 0.0], [0.0, 1.0]]], dtype=np.float32)
    (text,) = weight_matrices(weights, mask)
    assert json.loads(text) == [[1.0, 0.0], [0.0, 1.0]]


def test_no_heads_and_cached_layouts():
    mask = np.tril(np.ones((5, 5), dtype=bool))
    assert weight_matrices(np.zeros((0, 5, 5), dtype=np.float32), mask) == []
    assert layout(5, True) is layout(5, True)
    assert layout(5, False) is not layout(5, True)
    weights = softmax_rows(2, 5, mask, seed=1)
    assert layout(5, True).write(weights) == weight_matrices(weights, mask)
