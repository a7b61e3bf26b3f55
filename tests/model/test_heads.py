"""Head-role scores on attention patterns built by hand, where the right answer is known."""

from __future__ import annotations

import pytest
import torch
from attnscope.model.heads import (
    PROBE_SENTENCES,
    ROLES,
    first_token_score,
    head_role_scores,
    induction_score,
    induction_tokens,
    previous_token_score,
    self_score,
)

T = 9


def previous_token_pattern(T: int) -> torch.Tensor:
    """Every query attends to the token before it; the first (which has none) to itself."""
    p = torch.zeros(T, T)
    p[0, 0] = 1.0
    p[torch.arange(1, T), torch.arange(0, T - 1)] = 1.0
    return p


def first_token_pattern(T: int) -> torch.Tensor:
    p = torch.zeros(T, T)
    p[:, 0] = 1.0
    return p


def uniform_causal_pattern(T: int) -> torch.Tensor:
    tril = torch.tril(torch.ones(T, T))
    return tril / tril.sum(-1, keepdim=True)


def induction_pattern(prefix: int, n: int) -> torch.Tensor:
    """Second copy of a repeated sequence attends to the token after the earlier occurrence;
    everything else attends to itself."""
    T = prefix + 2 * n
    p = torch.eye(T)
    for j in range(n - 1):
        row = prefix + n + j
        p[row] = 0.0
        p[row, prefix + j + 1] = 1.0
    return p


def test_previous_token_pattern_scores():
    p = previous_token_pattern(T)
    assert previous_token_score(p).item() == 1.0
    assert self_score(p).item() == 0.0
    # only query 1's previous token is the first token
    assert first_token_score(p).item() == pytest.approx(1 / (T - 1))


def test_identity_pattern_scores():
    p = torch.eye(T)
    assert self_score(p).item() == 1.0
    assert previous_token_score(p).item() == 0.0
    assert first_token_score(p).item() == 0.0


def test_first_token_pattern_scores():
    p = first_token_pattern(T)
    assert first_token_score(p).item() == 1.0
    assert previous_token_score(p).item() == pytest.approx(1 / (T - 1))
    assert self_score(p).item() == 0.0


def test_uniform_pattern_scores():
    p = uniform_causal_pattern(T)
    expected = sum(1 / (t + 1) for t in range(1, T)) / (T - 1)
    for score in (previous_token_score, first_token_score, self_score):
        assert score(p).item() == pytest.approx(expected)


@pytest.mark.parametrize(("prefix", "n"), [(0, 5), (1, 10), (3, 7)])
def test_induction_pattern_scores_one_and_others_zero(prefix, n):
    assert induction_score(induction_pattern(prefix, n), prefix, n).item() == 1.0
    # a previous-token head or a self head is not an induction head
    T = prefix + 2 * n
    assert induction_score(previous_token_pattern(T), prefix, n).item() == 0.0
    assert induction_score(torch.eye(T), prefix, n).item() == 0.0


def test_scores_keep_the_leading_dimensions():
    """(L, nh, T, T) patterns score to (L, nh): one value per head."""
    heads = torch.stack([previous_token_pattern(T), torch.eye(T), first_token_pattern(T)])  # (3, T, T)
    layers = torch.stack([heads, heads.flip(0)])  # (2, 3, T, T)
    torch.testing.assert_close(previous_token_score(layers), torch.tensor([[1.0, 0, 1 / (T - 1)], [1 / (T - 1), 0, 1]]))
    torch.testing.assert_close(self_score(layers), torch.tensor([[0.0, 1, 0], [0, 1, 0]]))


def test_induction_tokens_are_seeded_merged_tokens():
    a = induction_tokens(300, n=12, batch=3, seed=5)
    assert a.shape == (3, 12)
    assert ((a >= 256) & (a < 300)).all()
    assert torch.equal(a, induction_tokens(300, n=12, batch=3, seed=5))
    assert not torch.equal(a, induction_tokens(300, n=12, batch=3, seed=6))


def test_head_role_scores_shape_and_range(model, tokenizer):
    model.train()
    scores = head_role_scores(model, tokenizer)
    assert scores.shape == (model.config.n_layer, model.config.n_head, len(ROLES))
    assert ((scores >= 0) & (scores <= 1)).all()
    assert model.training  # the caller's mode is restored


def test_head_role_scores_of_a_model_that_attends_uniformly(make_model, tokenizer):
    """With zero query/key projections every score is equal, so every causal row is uniform
    and each role's score has a closed form over the probe inputs."""
    model = make_model()
    with torch.no_grad():
        for block in model.transformer.h:
            C = model.config.n_embd
            block.attn.c_attn.weight[: 2 * C].zero_()  # q and k weights; v is left random
            block.attn.c_attn.bias[: 2 * C].zero_()
    scores = head_role_scores(model, tokenizer)

    def uniform_mean(rows: range) -> float:
        return sum(1 / (t + 1) for t in rows) / len(rows)

    natural = []
    for s in PROBE_SENTENCES:
        n_tokens = min(1 + len(tokenizer.encode_ids(s)), model.config.block_size)
        natural.append(uniform_mean(range(1, n_tokens)))
    expected_natural = sum(natural) / len(natural)  # previous, first and self are equal here
    n = min(40, (model.config.block_size - 1) // 2)
    expected_induction = uniform_mean(range(1 + n, 1 + n + n - 1))

    expected = torch.tensor([expected_natural, expected_natural, expected_induction, expected_natural])
    torch.testing.assert_close(scores, expected.expand_as(scores), atol=1e-5, rtol=0)
