"""The fast reductions of model.stats equal torch's own (group_max is max_pool2d over (1, k), row_max is
max(-1)), and the compiled statistics equal their definitions and the eager ones."""

import pytest
import torch
from attnscope.model.stats import GROUP, StatsAccumulator, group_max, row_max
from torch._dynamo.utils import counters
from torch.nn import functional as F


@pytest.mark.parametrize("s", [1, 5, 64, 127, 128, 129, 200, 1000, 4096])
@pytest.mark.parametrize("k", [1, 3, 16, 64])
def test_group_max_is_a_max_pool_over_runs_of_keys(s, k):
    x = torch.randn(3, 7, s, generator=torch.Generator().manual_seed(s * 100 + k))
    expected = F.max_pool2d(x, (1, k), ceil_mode=True) if k > 1 else x
    assert torch.equal(group_max(x, k), expected)


@pytest.mark.parametrize("s", [1, 2 * GROUP, 2 * GROUP + 1, 1000, 4096, 4097])
def test_row_max_gives_the_maximum_and_a_key_that_holds_it(s):
    g = torch.Generator().manual_seed(s)
    x = torch.randn(2, 9, s, generator=g).softmax(-1)
    x[0, 0] = 1.0 / s  # a uniform row: every key ties
    x[1, 1, -1] = 5.0  # the top key in the last, shorter run
    value, index = row_max(x)
    expected = x.max(-1).values
    assert torch.equal(value, expected)
    assert ((index >= 0) & (index < s)).all()
    assert torch.equal(x.gather(-1, index[..., None])[..., 0], expected)
    distinct = x[1:, 2:]  # random rows: one maximum, so one index
    assert torch.equal(index[1:, 2:], distinct.argmax(-1))


def _block_stats(q, k, divisor, mask, fuse, softcap=None, sink=None, rows=5):
    """StatsAccumulator over causal blocks of ``rows`` queries (the first block square, the others not)."""
    raw = q @ k.transpose(-1, -2)  # (H, T, T)
    scores = raw / divisor if softcap is None else torch.tanh(raw / divisor / softcap) * softcap
    scores = scores.masked_fill(~mask, float("-inf"))
    logits = scores if sink is None else torch.cat([scores, sink[:, None, None].expand(-1, len(mask), 1)], -1)
    pattern = logits.softmax(-1)[..., : len(mask)]
    acc = StatsAccumulator(q, k, divisor, softcap, sink, fuse=fuse)
    for q0 in range(0, len(mask), rows):
        q1 = min(len(mask), q0 + rows)
        acc.add(raw[:, q0:q1, :q1], scores[:, q0:q1, :q1], pattern[:, q0:q1, :q1], mask[q0:q1, :q1])
    return acc.result(), raw, pattern


def _masks(T: int) -> dict[str, torch.Tensor]:
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return {"causal": causal, "window": causal & ~torch.ones(T, T, dtype=torch.bool).tril(-4)}


@pytest.mark.slow
@pytest.mark.parametrize("divisor", [4.0, 0.5])
def test_compiled_statistics_equal_their_definitions_and_eager(divisor):
    """``fuse`` (torch.compile of the block passes) gives the definitions: population variances over
    the visible scores, entropies and maxima of explicit softmax rows; and eager's numbers. One
    compiled function serves texts of other lengths and masks without compiling again."""
    g = torch.Generator().manual_seed(3)
    graphs = []
    for T in (23, 31):  # 31: a last block of one row (eager: a size of 1 is a shape of its own)
        q, k = torch.randn(3, T, 8, generator=g) * 2, torch.randn(3, T, 8, generator=g) * 2
        for name, mask in _masks(T).items():
            got, raw, pattern = _block_stats(q, k, divisor, mask, fuse=True)
            eager, _, _ = _block_stats(q, k, divisor, mask, fuse=False)
            unscaled = torch.softmax(raw.double().masked_fill(~mask, float("-inf")), -1)
            visible = raw.double()[:, mask]  # (H, visible cells)
            expected = {
                "var_q": q.double().var(dim=(-2, -1), unbiased=False),
                "var_scores_raw": visible.var(-1, unbiased=False),
                "var_scores": (visible / divisor).var(-1, unbiased=False),
                "mean_scores_raw": visible.mean(-1),
                "row_entropy": -(pattern.double() * pattern.double().clamp_min(1e-300).log()).sum(-1),
                "row_entropy_unscaled": -(unscaled * unscaled.clamp_min(1e-300).log()).sum(-1),
                "max_weight": pattern.double().amax(-1).mean(-1),
                "max_weight_unscaled": unscaled.amax(-1).mean(-1),
            }
            for stat, value in expected.items():
                torch.testing.assert_close(got[stat].double(), value, rtol=2e-4, atol=2e-5, msg=f"{stat} {name} {T}")
            for stat, value in eager.items():
                torch.testing.assert_close(got[stat], value, rtol=1e-4, atol=1e-5, equal_nan=True, msg=stat)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[0] >= 1 and graphs[1] == graphs[0]  # the second length compiled nothing new


@pytest.mark.slow
def test_compiled_statistics_with_a_softcap_and_sinks_equal_eager():
    """Gemma 2's softcap and gpt-oss's sinks, compiled: eager's numbers (tested against transformers'
    eager attention in tests/model/families), for every head and row."""
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(2, 19, 8, generator=g) * 3, torch.randn(2, 19, 8, generator=g) * 3
    sink = torch.tensor([0.5, -1.0])
    mask = _masks(19)["causal"]
    got, _, _ = _block_stats(q, k, 2.0, mask, fuse=True, softcap=5.0, sink=sink)
    eager, _, _ = _block_stats(q, k, 2.0, mask, fuse=False, softcap=5.0, sink=sink)
    for stat, value in eager.items():
        torch.testing.assert_close(got[stat], value, rtol=1e-4, atol=1e-5, equal_nan=True, msg=stat)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_compiled_statistics_equal_eager():
    """On a GPU (Triton kernels): compiled and eager statistics of the same blocks agree."""
    g = torch.Generator().manual_seed(5)
    for T in (37, 64):
        q, k = (torch.randn(6, T, 16, generator=g).cuda() * 2 for _ in range(2))
        mask = _masks(T)["causal"].cuda()
        got, _, _ = _block_stats(q, k, 4.0, mask, fuse=True, rows=9)
        eager, _, _ = _block_stats(q, k, 4.0, mask, fuse=False, rows=9)
        for stat, value in eager.items():
            torch.testing.assert_close(got[stat], value, rtol=1e-4, atol=1e-5, equal_nan=True, msg=stat)
