"""The transformer: both attention paths compute the same thing, and every traced step is
what its name says."""

from __future__ import annotations

import math

import pytest
import torch
from attnscope.model.ours.gpt import GPT, AttentionOptions, GPTConfig
from attnscope.model.trace import attention_mask
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional as F

OPTIONS = [
    AttentionOptions(),
    AttentionOptions(causal=False),
    AttentionOptions(causal=True, divisor=2.5),
    AttentionOptions(causal=False, divisor=1.0),
]


def random_ids(config: GPTConfig, B: int, T: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (B, T), generator=g)


def run_traced(model: GPT, idx: torch.Tensor, opts: AttentionOptions):
    trace = []
    with torch.no_grad():
        logits, _ = model(idx, opts=opts, trace=trace)
    return logits, trace


def check_trace_invariants(trace, opts: AttentionOptions, head_dim: int, T: int) -> None:
    """Everything a traced layer holds is consistent with its definition."""
    mask = attention_mask(T, opts.causal, trace[0].mask.device)
    above = torch.triu(torch.ones(T, T, dtype=torch.bool, device=mask.device), diagonal=1)
    for t in trace:
        assert torch.equal(t.mask, mask)
        assert t.divisor == pytest.approx(opts.divisor_for(math.sqrt(head_dim)))
        # rows are probability distributions
        torch.testing.assert_close(t.pattern.sum(-1), torch.ones_like(t.pattern[..., 0]), atol=1e-5, rtol=0)
        torch.testing.assert_close(t.pattern_unscaled.sum(-1), torch.ones_like(t.pattern[..., 0]), atol=1e-5, rtol=0)
        assert (t.pattern >= 0).all()
        if opts.causal:
            # the future gets exactly zero weight, and -inf before the softmax
            assert (t.pattern[..., above] == 0).all()
            assert (t.pattern_unscaled[..., above] == 0).all()
            assert torch.isneginf(t.attn_scores[..., above]).all()
        elif T > 1:
            assert (t.pattern[..., above] > 0).all()
        # each step is what its name says
        torch.testing.assert_close(t.attn_scores_raw, t.q @ t.k.transpose(-2, -1))
        expected_scores = (t.attn_scores_raw / t.divisor).masked_fill(~t.mask, float("-inf"))
        torch.testing.assert_close(t.attn_scores, expected_scores)
        torch.testing.assert_close(t.pattern, F.softmax(expected_scores, dim=-1))
        unscaled = F.softmax(t.attn_scores_raw.masked_fill(~t.mask, float("-inf")), dim=-1)
        torch.testing.assert_close(t.pattern_unscaled, unscaled)
        torch.testing.assert_close(t.z, t.pattern @ t.v)


@pytest.mark.parametrize("opts", OPTIONS, ids=str)
def test_fast_path_equals_explicit_path(model, opts):
    idx = random_ids(model.config, B=2, T=model.config.block_size)
    with torch.no_grad():
        fast, _ = model(idx, opts=opts)
    explicit, trace = run_traced(model, idx, opts)
    assert len(trace) == model.config.n_layer
    assert (fast - explicit).abs().max().item() <= 1e-5


@pytest.mark.parametrize("opts", OPTIONS, ids=str)
def test_trace_steps_are_consistent(model, opts):
    T = 12
    _, trace = run_traced(model, random_ids(model.config, B=2, T=T, seed=1), opts)
    cfg = model.config
    for t in trace:
        assert t.q.shape == t.k.shape == t.v.shape == t.z.shape == (2, cfg.n_head, T, cfg.head_dim)
        assert t.attn_scores_raw.shape == t.pattern.shape == (2, cfg.n_head, T, T)
    check_trace_invariants(trace, opts, cfg.head_dim, T)


@settings(max_examples=25, deadline=None)
@given(
    T=st.integers(1, 32),
    causal=st.booleans(),
    scale=st.one_of(st.none(), st.floats(0.25, 20.0)),
    seed=st.integers(0, 2**16),
)
def test_paths_agree_for_any_length_and_options(tiny_config, T, causal, scale, seed):
    torch.manual_seed(seed)
    model = GPT(tiny_config).eval()
    opts = AttentionOptions(causal=causal, divisor=scale)
    idx = random_ids(tiny_config, B=1, T=T, seed=seed)
    with torch.no_grad():
        fast, _ = model(idx, opts=opts)
    explicit, trace = run_traced(model, idx, opts)
    assert (fast - explicit).abs().max().item() <= 1e-5
    check_trace_invariants(trace, opts, tiny_config.head_dim, T)


def test_causal_model_does_not_see_the_future(model):
    """Changing the last token leaves every earlier position's logits unchanged."""
    idx = random_ids(model.config, B=1, T=16, seed=2)
    changed = idx.clone()
    changed[0, -1] = (changed[0, -1] + 1) % model.config.vocab_size
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
        c, _ = model(idx, opts=AttentionOptions(causal=False))
        d, _ = model(changed, opts=AttentionOptions(causal=False))
    torch.testing.assert_close(a[:, :-1], b[:, :-1])
    assert not torch.allclose(a[:, -1], b[:, -1])
    # without the mask, the first position does see the change
    assert not torch.allclose(c[:, 0], d[:, 0])


def test_scale_option_changes_the_output(model):
    idx = random_ids(model.config, B=1, T=16, seed=3)
    with torch.no_grad():
        default, _ = model(idx)
        explicit_default, _ = model(idx, opts=AttentionOptions(divisor=math.sqrt(model.config.head_dim)))
        other, _ = model(idx, opts=AttentionOptions(divisor=1.0))
    torch.testing.assert_close(default, explicit_default)
    assert not torch.allclose(default, other)


def test_loss_is_mean_cross_entropy_and_near_log_vocab_at_init(tiny_config):
    torch.manual_seed(0)
    model = GPT(tiny_config).eval()
    idx = random_ids(tiny_config, B=4, T=tiny_config.block_size, seed=4)
    targets = random_ids(tiny_config, B=4, T=tiny_config.block_size, seed=5)
    targets[0, :5] = -1  # ignored positions
    with torch.no_grad():
        logits, loss = model(idx, targets)
    keep = targets >= 0
    expected = F.cross_entropy(logits[keep], targets[keep])
    torch.testing.assert_close(loss, expected)
    # std-0.02 initialisation gives nearly uniform predictions: loss ≈ ln(V)
    assert abs(loss.item() - math.log(tiny_config.vocab_size)) < 0.05


def test_weights_are_tied_and_init_is_gpt2(tiny_config):
    torch.manual_seed(0)
    model = GPT(tiny_config)
    assert model.lm_head.weight is model.transformer.wte.weight
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            assert p.std().item() == pytest.approx(0.02 / math.sqrt(2 * tiny_config.n_layer), rel=0.15)
        elif name.endswith(".bias"):
            assert (p == 0).all()


def test_longer_than_context_is_refused(model):
    idx = random_ids(model.config, B=1, T=model.config.block_size + 1)
    with pytest.raises(ValueError, match="longer than the context"):
        model(idx)


def test_config_round_trips_through_dict(tiny_config):
    d = tiny_config.to_dict()
    assert GPTConfig.from_dict({**d, "unknown_field": 1}) == tiny_config
    assert tiny_config.head_dim == tiny_config.n_embd // tiny_config.n_head


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("opts", OPTIONS, ids=str)
def test_paths_agree_on_gpu(make_model, opts):
    model = make_model().to("cuda")
    T = model.config.block_size
    idx = random_ids(model.config, B=2, T=T).to("cuda")
    with torch.no_grad():
        fast, _ = model(idx, opts=opts)
    explicit, trace = run_traced(model, idx, opts)
    # fp32 on the GPU may use TF32 matmuls in the fused kernel; keep the CPU bound when it is off
    tol = 1e-5 if not torch.backends.cuda.matmul.allow_tf32 else 1e-3
    assert (fast - explicit).abs().max().item() <= tol
    assert trace[0].pattern.device.type == "cuda"
    check_trace_invariants(trace, opts, model.config.head_dim, T)
    # and the GPU agrees with the CPU
    with torch.no_grad():
        cpu_logits, _ = model.cpu()(idx.cpu(), opts=opts)
    assert (cpu_logits - explicit.cpu()).abs().max().item() <= 1e-4


@pytest.mark.parametrize(
    ("divisor", "scaling"),
    [(None, None), (8.0, None), (math.sqrt(32), None), (2.7, None), (None, 80**-0.5), (None, 1 / 3)],
)
def test_masked_scores_are_the_scaling_then_masked_fill_to_the_bit(divisor, scaling):
    from attnscope.model.trace import masked_scores

    g = torch.Generator().manual_seed(0)
    raw = torch.randn(2, 3, 17, 40, generator=g) * 30  # (B, nh, t, s)
    m = torch.rand(17, 40, generator=g) > 0.3
    scaled = raw / divisor if divisor is not None else raw * scaling if scaling is not None else raw
    expected = scaled.masked_fill(~m, float("-inf"))
    assert torch.equal(masked_scores(raw, m, divisor=divisor, scaling=scaling), expected)
    if divisor is not None:  # a divisor tensor of the scores' dtype, as GPT-2's eager attention divides by
        assert torch.equal(masked_scores(raw, m, divisor=torch.full((), divisor)), expected)
