"""inspect(), head_stats() and predictions(): shapes, invariants, and no hidden state."""

from __future__ import annotations

import math

import pytest
import torch
from attnscope.model.inspection import (
    head_stats,
    inspect,
    inspect_ids,
    masked_var,
    predictions,
    row_entropy,
    scale_divisor,
)
from torch.nn import functional as F

TEXT = "The cat sat on the mat because it was warm. The dog sat on the mat too."


def test_trace_shapes_and_tokens(model, tokenizer):
    tr = inspect(model, tokenizer, TEXT)
    enc = tokenizer.encode(TEXT)
    cfg = model.config
    T = len(enc.ids)
    assert tr.token_ids == enc.ids and tr.tokens == enc.tokens and tr.offsets == enc.offsets
    assert tr.n_tokens == T
    assert tr.pattern.shape == tr.attn_scores_raw.shape == (cfg.n_layer, cfg.n_head, T, T)
    assert tr.q.shape == tr.z.shape == (cfg.n_layer, cfg.n_head, T, cfg.head_dim)
    assert tr.logits.shape == (T, cfg.vocab_size)
    assert tr.mask.shape == (T, T)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("scale", ["sqrt_dk", "none", 3.0])
def test_patterns_are_distributions_and_respect_the_mask(model, tokenizer, causal, scale):
    tr = inspect(model, tokenizer, TEXT, causal=causal, scale=scale)
    T = tr.n_tokens
    above = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for p in (tr.pattern, tr.pattern_unscaled):
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-5, rtol=0)
        if causal:
            assert (p[..., above] == 0).all()
        else:
            assert (p[..., above] > 0).all()
    assert torch.equal(tr.mask, ~above if causal else torch.ones(T, T, dtype=torch.bool))


def test_pattern_unscaled_is_softmax_of_masked_raw_scores(model, tokenizer):
    tr = inspect(model, tokenizer, TEXT)
    expected = F.softmax(tr.attn_scores_raw.masked_fill(~tr.mask, float("-inf")), dim=-1)
    torch.testing.assert_close(tr.pattern_unscaled, expected)
    # and the scaled pattern is the softmax of raw / sqrt(d_k)
    scaled = F.softmax((tr.attn_scores_raw / math.sqrt(model.config.head_dim)).masked_fill(~tr.mask, -math.inf), -1)
    torch.testing.assert_close(tr.pattern, scaled)


def test_inspect_logits_equal_the_fast_forward_pass(model, tokenizer):
    tr = inspect(model, tokenizer, TEXT)
    with torch.no_grad():
        fast, _ = model(torch.tensor([tr.token_ids]))
    assert (fast[0] - tr.logits).abs().max().item() <= 1e-5


def test_without_logits_the_attention_is_the_same_and_the_lm_head_is_skipped(model, tokenizer):
    ids = tokenizer.encode_ids(TEXT)
    full, logits, divisor = inspect_ids(model, ids)
    bare, none, divisor_bare = inspect_ids(model, ids, logits=False)
    assert none is None and divisor_bare == divisor and logits.shape == (len(ids), model.config.vocab_size)
    for a, b in zip(full, bare):
        for name in ("q", "k", "v", "attn_scores_raw", "attn_scores", "pattern", "pattern_unscaled", "z", "mask"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    with torch.no_grad():  # forward = LM head over hidden_states
        x = model.hidden_states(torch.tensor([ids]), trace=[])  # the explicit path, as inspect_ids runs
        assert torch.equal(model.lm_head(x)[0], logits)


@pytest.mark.parametrize(
    ("scale", "expected_ratio"),
    [("sqrt_dk", None), ("none", 1.0), (2.0, 4.0), (0.5, 0.25), (11.0, 121.0)],
)
def test_variance_ratio_is_scale_squared(model, tokenizer, scale, expected_ratio):
    stats = head_stats(inspect(model, tokenizer, TEXT, scale=scale))
    expected = model.config.head_dim if expected_ratio is None else expected_ratio  # sqrt(d_k)² = d_k
    torch.testing.assert_close(stats.variance_ratio, torch.full_like(stats.variance_ratio, expected), rtol=1e-4, atol=0)


def test_variance_ratio_for_a_single_token_is_undefined(model, tokenizer):
    tr = inspect(model, tokenizer, "A")
    assert tr.n_tokens == 1
    stats = head_stats(tr)
    assert (stats.var_scores_raw == 0).all() and (stats.var_scores == 0).all()
    assert stats.variance_ratio.isnan().all()  # 0 / 0: no value, not divisor²
    # the rest is defined: one key, all the weight on it
    assert (stats.entropy == 0).all() and (stats.max_weight == 1).all()


def test_head_stats_shapes_and_ranges(model, tokenizer):
    tr = inspect(model, tokenizer, TEXT)
    s = head_stats(tr)
    L, nh, T = model.config.n_layer, model.config.n_head, tr.n_tokens
    for name in ("var_q", "var_k", "var_scores_raw", "var_scores", "variance_ratio", "entropy", "max_weight"):
        assert getattr(s, name).shape == (L, nh), name
    assert s.row_entropy.shape == (L, nh, T)
    # a causal row t spreads over t + 1 keys, so its entropy is at most ln(t + 1)
    bound = torch.log(torch.arange(1, T + 1, dtype=torch.float32))
    assert (s.row_entropy <= bound + 1e-5).all() and (s.row_entropy >= -1e-6).all()
    assert ((s.max_weight > 0) & (s.max_weight <= 1 + 1e-6)).all()
    # the unscaled pattern is peakier than the scaled one whenever the scale is > 1
    assert (s.entropy_unscaled <= s.entropy + 1e-5).all()


def test_inspect_leaves_no_state(model, tokenizer):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    first = inspect(model, tokenizer, TEXT)
    other_a = inspect(model, tokenizer, TEXT, causal=False, scale=2.0)
    other_b = inspect(model, tokenizer, TEXT, causal=True, scale="none")
    again = inspect(model, tokenizer, TEXT)
    for name in ("pattern", "pattern_unscaled", "attn_scores_raw", "z", "logits"):
        assert torch.equal(getattr(first, name), getattr(again, name)), name
    assert not torch.allclose(first.pattern, other_a.pattern)
    assert not torch.allclose(first.pattern, other_b.pattern)
    assert not model.training
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_scale_divisor():
    assert scale_divisor("sqrt_dk", 32) == pytest.approx(math.sqrt(32))
    assert scale_divisor("none", 32) == 1.0
    assert scale_divisor(2.5, 32) == 2.5
    assert scale_divisor("4", 32) == 4.0
    for bad in ("sqrt", 0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            scale_divisor(bad, 32)


def test_empty_and_too_long_texts_are_refused(model, tokenizer):
    with pytest.raises(ValueError, match="no tokens"):
        inspect(model, tokenizer, "")
    long_text = " ".join(["cat"] * (model.config.block_size + 5))
    with pytest.raises(ValueError, match="context"):
        inspect(model, tokenizer, long_text)


def test_row_entropy_of_known_rows():
    uniform = torch.full((1, 4), 0.25)
    one_hot = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    assert row_entropy(uniform).item() == pytest.approx(math.log(4))
    assert row_entropy(one_hot).item() == 0.0


def test_masked_var_is_population_variance_of_the_kept_entries():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 5, generator=g)
    mask = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    got = masked_var(x, mask)
    for i in range(3):
        assert got[i].item() == pytest.approx(x[i][mask].var(unbiased=False).item(), rel=1e-5)


def test_predictions(model, tokenizer):
    tr = inspect(model, tokenizer, TEXT)
    preds = predictions(tr, tokenizer, top_k=5)
    assert len(preds) == tr.n_tokens
    probs_all = F.softmax(tr.logits, dim=-1)
    for t, row in enumerate(preds):
        assert len(row) == 5
        probs = [p.prob for p in row]
        assert probs == sorted(probs, reverse=True)
        assert row[0].id == int(probs_all[t].argmax())
        assert row[0].prob == pytest.approx(float(probs_all[t].max()), rel=1e-5)
        assert all(p.token == tokenizer.display(p.id) for p in row)
    # a lower temperature sharpens, a higher one flattens
    cold = predictions(tr, tokenizer, top_k=1, temperature=0.5)
    hot = predictions(tr, tokenizer, top_k=1, temperature=2.0)
    for c, p, h in zip(cold, preds, hot):
        assert c[0].prob >= p[0].prob >= h[0].prob
    assert predictions(tr, tokenizer, top_k=0) == [[] for _ in range(tr.n_tokens)]
    with pytest.raises(ValueError):
        predictions(tr, tokenizer, top_k=3, temperature=0)
