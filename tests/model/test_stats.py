"""The fast reductions of model.stats equal torch's own: group_max is max_pool2d over (1, k), row_max is max(-1)."""

import pytest
import torch
from attnscope.model.stats import GROUP, group_max, row_max
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
