"""model.compare's per-row Jensen–Shannon divergence: a float64 computation's, never below 0."""

import numpy as np
import torch
from attnscope.model.compare import js_bits


def js_float64(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    p, q = p.double(), q.double()
    m = (p + q) / 2
    kl = lambda a: torch.where(a > 0, a * (a / m).log(), 0).sum(-1)  # noqa: E731
    return (kl(p) + kl(q)) / (2 * np.log(2))


def test_js_bits_is_the_divergence_and_never_negative():
    g = torch.Generator().manual_seed(0)
    p = torch.randn(64, 300, generator=g).mul(3).softmax(-1)
    for noise in (1e-5, 1e-3, 1.0):  # nearly equal rows (float32 rounding) to far apart ones
        q = (p.log() + torch.randn(64, 300, generator=g) * noise).softmax(-1)
        got = js_bits(p, q)
        assert (got >= 0).all()
        torch.testing.assert_close(got.double(), js_float64(p, q), rtol=1e-3, atol=2e-7)
    assert torch.equal(js_bits(p, p), torch.zeros(64))  # the same rows: exactly 0
