"""A hybrid's value-linear mixers as matrices: M from each layer's own scan inputs, held exactly.

Tiny random hybrids are built here from transformers configs (the projections feeding q/k-like
inputs scaled up). Each layer's scan is recorded (model/families/implicit.py); the test then
(a) computes M by hand in float64, straight from the formula (Gated DeltaNet with its d × d
products A_r written out), and holds the served blocks of rows equal to it, and (b) holds
Σ_s M[t, s] v_s (+ skip · v_t) equal to the scan's own output.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.families import mixers  # noqa: E402
from attnscope.model.families.implicit import recording_scans
from attnscope.model.families.implicit_layer import implicit_layer  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from tests.kit.family import QK_GAIN, family_configs  # noqa: E402
from tests.kit.implicit import BAMBA, JAMBA, KIMI, MINIMAX  # noqa: E402

T = 21  # tokens: more than one scan chunk for the tiny chunk sizes below, not a multiple of them

HYBRIDS = {
    "qwen3_next": (family_configs()["qwen3_next"], "gated_deltanet"),
    # grouped heads: 2 q/k heads serve 4 value heads
    "qwen3_next_grouped": (
        {**family_configs()["qwen3_next"], "linear_num_value_heads": 4},
        "gated_deltanet",
    ),
    "bamba": (dict(model_type="bamba", **BAMBA), "mamba2"),
    "falcon_h1": (family_configs()["falcon_h1"], "mamba2"),
    "minimax": (dict(model_type="minimax", **MINIMAX), "lightning"),
    "lfm2": (family_configs()["lfm2"], "short_conv"),
    # Kimi Delta Attention (a decay per channel) beside MLA
    "kimi_linear": (dict(model_type="kimi_linear", **KIMI, bos_token_id=1, eos_token_id=2), "kimi_delta"),
    "jamba": (dict(model_type="jamba", **JAMBA), "mamba1"),
}


def tiny(config: dict):
    kwargs = dict(config)
    model_type = kwargs.pop("model_type")
    kwargs["vocab_size"] = 256
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **kwargs)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("in_proj_qkvz.weight", "qkv_proj.weight")):
                p.mul_(QK_GAIN / 4)
    return model


@pytest.fixture(scope="module", params=list(HYBRIDS))
def recorded(request):
    config, mixer = HYBRIDS[request.param]
    model = tiny(config)
    ids = torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), recording_scans(model) as scans:
        model(ids)
    return mixer, dict(scans)


def by_hand(scan) -> torch.Tensor:
    """M in float64 from the formula, no shortcut: (heads, T, T)."""
    p = {n: x.double() for n, x in scan.parts.items()}
    if scan.mixer in ("gated_deltanet", "kimi_delta"):
        H, n, d = p["q"].shape
        eye = torch.eye(d, dtype=torch.float64)
        g = p["g"] if p["g"].dim() == 3 else p["g"][..., None].expand(H, n, d)  # Kimi: a decay per channel
        M = torch.zeros(H, n, n, dtype=torch.float64)
        for h in range(H):
            # A_r = (I − β_r k_r k_rᵀ) diag(exp(g_r)); with one decay a head, exp(g_r)(I − β_r k_r k_rᵀ)
            A = [
                (eye - p["beta"][h, r] * torch.outer(p["k"][h, r], p["k"][h, r])) @ torch.diag(torch.exp(g[h, r]))
                for r in range(n)
            ]
            for t in range(n):
                for s in range(t + 1):
                    prod = eye
                    for r in range(s + 1, t + 1):
                        prod = prod @ A[r].T
                    M[h, t, s] = p["beta"][h, s] * p["k"][h, s] @ prod @ p["q"][h, t]
        return M
    n = scan.v.shape[1]
    t, s = torch.arange(n)[:, None], torch.arange(n)[None, :]
    if scan.mixer == "mamba2":
        csum = torch.cat([torch.zeros(p["dt"].shape[0], 1, dtype=torch.float64), p["dt"].cumsum(1)], dim=1)
        between = csum[:, 1:, None] - csum[:, None, 1:]  # Σ_{r=s+1..t} Δ_r
        M = torch.einsum("htn,hsn->hts", p["C"], p["B"]) * torch.exp(p["A"][:, None, None] * between)
        return torch.where(s <= t, M * p["dt"][:, None, :], 0.0)
    if scan.mixer == "mamba1":
        csum = torch.cat([torch.zeros(p["dt"].shape[0], 1, dtype=torch.float64), p["dt"].cumsum(1)], dim=1)
        between = csum[:, 1:, None] - csum[:, None, 1:]  # (channels, t, s)
        decay = torch.exp(p["A"][:, None, None, :] * between[..., None].clamp(min=0))
        M = torch.einsum("tn,ctsn,sn->cts", p["C"], decay, p["B"]) * p["dt"][:, None, :]
        return torch.where(s <= t, M, 0.0)
    if scan.mixer == "lightning":
        decay = torch.exp(-p["slope"][:, None, None] * (t - s))
        return torch.where(s <= t, torch.einsum("htd,hsd->hts", p["q"], p["k"]) * decay, 0.0)
    L = p["weight"].shape[-1]
    lag = t - s
    taps = p["weight"][:, (L - 1 - lag).clamp(0, L - 1)]
    return torch.where((lag >= 0) & (lag < L), p["C"][:, :, None] * taps * p["B"][:, None, :], 0.0)


def test_each_mixer_layer_is_recorded(recorded):
    mixer, scans = recorded
    assert scans and all(scan.mixer == mixer for scan in scans.values())


def test_blocks_of_rows_equal_the_formula(recorded):
    _, scans = recorded
    for scan in scans.values():
        whole = by_hand(scan)
        for r0, r1 in ((0, 7), (7, 8), (8, T)):
            torch.testing.assert_close(scan.rows(r0, r1).double(), whole[:, r0:r1], rtol=1e-4, atol=1e-5)


def test_m_times_values_is_the_scans_output(recorded):
    _, scans = recorded
    for scan in scans.values():
        M = by_hand(scan)
        o = torch.einsum("hts,hsd->htd", M, scan.v.double())
        if scan.skip is not None:
            o = o + scan.skip.double()[:, None, None] * scan.v.double()
        if scan.gate is not None:  # the scan multiplies by its own output gate (Mamba-1's silu(z))
            o = o * scan.gate.double()
        scale = scan.out.abs().max().item()
        assert scale > 1e-6  # the layer does mix
        torch.testing.assert_close(o, scan.out.double(), rtol=1e-4, atol=1e-5 * scale)


def test_m_is_not_a_softmax(recorded):
    mixer, scans = recorded
    rows = torch.cat([scan.rows(0, T).flatten() for scan in scans.values()])
    assert torch.isfinite(rows).all()
    if mixer in ("gated_deltanet", "kimi_delta", "lightning", "short_conv", "mamba1"):
        assert (rows < 0).any()


@pytest.mark.parametrize("chunk", [1, 4, 5, 64])
def test_the_delta_rules_chunks_give_the_same_m(recorded, chunk):
    """Gated DeltaNet's rows from its chunked form (a triangular solve per chunk, a state carried across chunks)
    equal the formula, for chunks shorter than the text, not dividing it, and longer than it, and any rows."""
    mixer, scans = recorded
    if mixer not in ("gated_deltanet", "kimi_delta"):
        pytest.skip("the chunked form is the delta rule's")
    for scan in scans.values():
        p = scan.parts
        whole = by_hand(scan)
        blocks = list(mixers.delta_blocks(p["q"], p["k"], p["g"], p["beta"], chunk=chunk))
        assert [(a, b) for a, b, _ in blocks] == [(a, min(a + chunk, T)) for a in range(0, T, chunk)]
        for a, b, rows in blocks:
            torch.testing.assert_close(rows.double(), whole[:, a:b], rtol=1e-4, atol=1e-5)
        for r0, r1 in ((0, 3), (3, 13), (13, T)):
            got = mixers.delta_rows(p["q"], p["k"], p["g"], p["beta"], r0, r1, chunk)
            torch.testing.assert_close(got.double(), whole[:, r0:r1], rtol=1e-4, atol=1e-5)


def test_blocks_of_any_budget_give_the_same_layer(recorded):
    """What an answer holds of a layer does not depend on how many rows a block takes: one row at a time
    (a budget of one byte) and the whole matrix at once are the same numbers."""
    _, scans = recorded
    for scan in scans.values():
        row_by_row, whole = implicit_layer(scan, 1), implicit_layer(scan, 2**30)
        assert row_by_row.mixer == scan.mixer and row_by_row.per_channel == scan.per_channel
        np.testing.assert_allclose(row_by_row.pattern, whole.pattern, rtol=1e-5, atol=1e-6)
        heads = 1 if scan.per_channel else scan.v.shape[0]
        assert whole.pattern.shape == (heads, T, T)
        assert (whole.skip is None) == (scan.skip is None or scan.per_channel)


@pytest.mark.parametrize("family", ["minimax", "qwen3_next"])
def test_concurrent_calls_on_one_model_keep_their_own_scans(family):
    """The server runs requests in worker threads, each in its own context: one call's hooks are on the model
    while another call's forward pass runs through it, and must not take that pass for their own."""
    import contextvars

    model = tiny(HYBRIDS[family][0])
    first, second = (torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(seed)) for seed in (2, 3))

    def record(ids):
        with torch.no_grad(), recording_scans(model) as scans:
            model(ids)
        return {layer: scan.out.clone() for layer, scan in scans.items()}

    alone = record(first), record(second)
    with torch.no_grad(), recording_scans(model) as scans:
        model(first)
        other = contextvars.Context().run(record, second)  # another call, in its own context, meanwhile
    mine = {layer: scan.out for layer, scan in scans.items()}
    for got, expected in ((mine, alone[0]), (other, alone[1])):
        assert got.keys() == expected.keys()
        for layer, out in got.items():
            torch.testing.assert_close(out, expected[layer])
