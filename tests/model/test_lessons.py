"""The lessons reproduce the seed notebooks' figures and return JSON-ready values."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from attnscope.model.lessons import DRAWS, PRESETS, LessonArgumentError, bag_of_words, softmax_scaling, variance
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional as F


def only_json_types(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and only_json_types(v) for k, v in value.items())
    if isinstance(value, list):
        return all(only_json_types(v) for v in value)
    return isinstance(value, (bool, int, float, str))


# ------------------------------------------------------------------ bag of words


def test_bag_of_words_reproduces_the_seed_notebook():
    """Seed 000: x = torch.rand(4, 8, 2) after seeding 42; x[0] is our rand(8, 2)."""
    b = bag_of_words(8, 2, 42)
    assert b.x[0] == pytest.approx([0.8823, 0.9150], abs=1e-4)
    assert b.x[7] == pytest.approx([0.7411, 0.4294], abs=1e-4)
    expected_running_mean = [
        [0.8823, 0.9150],
        [0.6326, 0.9372],
        [0.5519, 0.8251],
        [0.4780, 0.8172],
        [0.5706, 0.6804],
        [0.6313, 0.6659],
        [0.6653, 0.6519],
        [0.6748, 0.6241],
    ]
    for got, want in zip(b.loop, expected_running_mean):
        assert got == pytest.approx(want, abs=1e-4)
    assert b.agree
    assert b.max_abs_diff < 1e-6


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 64), C=st.integers(1, 16), seed=st.integers(0, 2**31))
def test_bag_of_words_three_ways_agree(T, C, seed):
    b = bag_of_words(T, C, seed)
    assert b.agree
    assert b.max_abs_diff < 1e-5  # float32 sums of up to 64 numbers in [0, 1)
    assert len(b.x) == len(b.loop) == len(b.matmul) == len(b.softmax) == T
    assert all(len(row) == C for row in b.x + b.loop + b.matmul + b.softmax)
    # weights: row t is 1/(t+1) on columns 0..t and exactly 0 after
    for t, row in enumerate(b.weights):
        assert row[: t + 1] == pytest.approx([1 / (t + 1)] * (t + 1))
        assert all(w == 0.0 for w in row[t + 1 :])
    # the running mean of row t really is the mean of x[0..t]
    t = T - 1
    for c in range(C):
        assert b.loop[t][c] == pytest.approx(sum(b.x[s][c] for s in range(T)) / T, rel=1e-5)


def notebook_cell(draw: str, seed: int, B: int, T: int, C: int) -> tuple[torch.Tensor, ...]:
    """The oracle: the notebooks' bag-of-words cells, as they run them, on torch's global generator."""
    torch.manual_seed(seed)
    x = (torch.rand if draw == "rand" else torch.randn)(B, T, C)
    xbow = torch.zeros((B, T, C))  # version 1: a loop
    for b in range(B):
        for t in range(T):
            xprev = x[b, : t + 1]
            xbow[b, t] = torch.mean(xprev, dim=0)
    wei = torch.tril(torch.ones(T, T))  # version 2: tril, normalised rows
    wei = wei / wei.sum(dim=1, keepdim=True)
    xbow2 = wei @ x  # (T, T) @ (B, T, C) -> (B, T, C)
    tril = torch.tril(torch.ones(T, T))  # version 3: softmax of masked zeros
    wei = torch.zeros((T, T))
    wei = wei.masked_fill(tril == 0, float("-inf"))
    wei = F.softmax(wei, dim=-1)
    xbow3 = wei @ x
    return x, xbow, xbow2, xbow3, wei


def as_tensor(rows: list[list[float]]) -> torch.Tensor:
    """Our lists back to float32: exact, since each value is a float32 widened to a Python float."""
    return torch.tensor(rows, dtype=torch.float32)


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize(("T", "C"), [(8, 2), (8, 16), (5, 3), (64, 16), (1, 1)])
def test_each_preset_is_the_notebooks_own_draw_bit_for_bit(preset, T, C):
    """x[0] and the three xbow[0] equal, bit for bit, what torch computes in the notebook's cells (B = 4)."""
    draw, seed, _ = PRESETS[preset]
    b = bag_of_words(T, C, seed, draw, 4)
    x, xbow, xbow2, xbow3, wei = notebook_cell(draw, seed, 4, T, C)
    assert (b.draw, b.seed, b.B) == (draw, seed, 4)
    assert torch.equal(as_tensor(b.x), x[0])
    assert torch.equal(as_tensor(b.loop), xbow[0])
    assert torch.equal(as_tensor(b.matmul), xbow2[0])
    assert torch.equal(as_tensor(b.softmax), xbow3[0])
    assert torch.equal(as_tensor(b.weights), wei)


def test_the_presets_name_their_notebooks_and_draws():
    assert PRESETS["notebook-000"][:2] == ("rand", 42)
    assert PRESETS["notebook-001-003"][:2] == ("randn", 42)
    assert PRESETS["lecture"][:2] == ("randn", 1337)
    for draw, seed, label in PRESETS.values():
        assert f"torch.{draw}(B, T, C)" in label and str(seed) in label


@pytest.mark.parametrize("B", [1, 2, 16])
@pytest.mark.parametrize("draw", DRAWS)
def test_other_batch_sizes_follow_torch_too(B, draw):
    b = bag_of_words(8, 3, 7, draw, B)
    x, xbow, *_ = notebook_cell(draw, 7, B, 8, 3)
    assert torch.equal(as_tensor(b.x), x[0]) and torch.equal(as_tensor(b.loop), xbow[0])


def test_randn_depends_on_the_batch_and_rand_does_not():
    """Why B is a field: randn fills in blocks of 16, so x[0] of (4, 8, 3) is not a fresh (1, 8, 3) draw."""
    assert bag_of_words(8, 3, 42, "randn", 4).x != bag_of_words(8, 3, 42, "randn", 1).x
    assert bag_of_words(8, 3, 42, "rand", 4).x == bag_of_words(8, 3, 42, "rand", 1).x


def test_the_draws_differ_in_distribution():
    uniform = torch.tensor(bag_of_words(64, 16, 0, "rand").x)
    normal = torch.tensor(bag_of_words(64, 16, 0, "randn").x)
    assert 0 <= float(uniform.min()) and float(uniform.max()) < 1
    assert float(normal.min()) < 0  # 1024 normals: P(all >= 0) = 2^-1024
    assert abs(float(normal.mean())) < 0.15 and 0.8 < float(normal.std()) < 1.2  # ~5 standard errors


def test_bag_of_words_is_seeded():
    assert bag_of_words(5, 3, 1) == bag_of_words(5, 3, 1)
    assert bag_of_words(5, 3, 1).x != bag_of_words(5, 3, 2).x


# ------------------------------------------------------------------ softmax scaling


def test_softmax_scaling_reproduces_the_seed_notebook():
    s = softmax_scaling([0.1, -0.2, 0.3, -0.2, 0.5], 8)
    assert s.var == pytest.approx(0.095, abs=1e-6)
    assert s.var_scaled == pytest.approx(6.08, abs=1e-6)
    assert s.softmax == pytest.approx([0.1925, 0.1426, 0.2351, 0.1426, 0.2872], abs=1e-4)
    assert s.softmax_scaled == pytest.approx([0.0326, 0.0030, 0.1615, 0.0030, 0.8000], abs=1e-4)
    assert s.entropy_scaled < s.entropy


@settings(max_examples=60, deadline=None)
@given(
    logits=st.lists(st.floats(-20, 20), min_size=1, max_size=64),
    factor=st.floats(0.01, 50),
)
def test_softmax_scaling_properties(logits, factor):
    s = softmax_scaling(logits, factor)
    assert sum(s.softmax) == pytest.approx(1.0) and sum(s.softmax_scaled) == pytest.approx(1.0)
    assert s.var_scaled == pytest.approx(factor**2 * s.var, rel=1e-9, abs=1e-12)
    assert 0 <= s.entropy <= math.log(len(logits)) + 1e-9
    # sharper with a factor above 1, flatter below (entropy of softmax(βz) falls as β grows)
    if factor > 1:
        assert s.entropy_scaled <= s.entropy + 1e-9
    else:
        assert s.entropy_scaled >= s.entropy - 1e-9
    # the order of the probabilities is the order of the logits
    top = max(range(len(logits)), key=lambda i: logits[i])
    assert s.softmax_scaled[top] == pytest.approx(max(s.softmax_scaled))


def test_single_logit():
    s = softmax_scaling([3.0], 2.0)
    assert s.softmax == [1.0] and s.softmax_scaled == [1.0]
    assert s.var == 0.0 and s.entropy == 0.0


# ------------------------------------------------------------------ variance


def relative_standard_error(head_size: int, T: int, samples: int) -> float:
    """Standard error of var(q·kᵀ) / head_size for q, k ~ N(0, 1).

    A score S = Σ_m q_m k_m over d = head_size dims has E S² = d and E S⁴ = 3d² + 6d, so
    Var(S²) = 2d² + 6d. Two scores sharing a query (or a key) are correlated:
    Cov(S_ij², S_il²) = E|q|⁴ - d² = 2d. Each of the N = samples·T² scores shares its query
    with T-1 others and its key with T-1 others, so
    Var(mean S²) = (2d² + 6d + 4d(T-1)) / N, and relative to d:
    """
    d, N = head_size, samples * T * T
    return math.sqrt((2 + 6 / d + 4 * (T - 1) / d) / N)


@pytest.mark.parametrize("head_size", [16, 64])
@pytest.mark.parametrize("seed", [0, 1])
def test_variance_grows_with_head_size_and_scaling_removes_it(head_size, seed):
    T, samples = 16, 256
    v = variance(head_size, T, seed, samples)
    # 5 standard errors: a seed this far out happens about once in 1.7 million
    tol = 5 * relative_standard_error(head_size, T, samples)  # ≈ 0.048 for 16, 0.034 for 64
    assert v.var_scores_raw / head_size == pytest.approx(1.0, abs=tol)
    assert v.var_scores == pytest.approx(1.0, abs=tol)
    # q and k are N·head_size unit normals each; 0.02 is > 10 standard errors
    assert v.var_q == pytest.approx(1.0, abs=0.02) and v.var_k == pytest.approx(1.0, abs=0.02)
    # the ratio is what the scaling divides by, whatever the sample
    assert v.ratio == pytest.approx(head_size, rel=1e-5)


def test_variance_histograms():
    v = variance(64, 8, 3, 32)
    n = 32 * 8 * 8
    assert len(v.bin_edges) == 41 and len(v.hist_raw) == len(v.hist_scaled) == 40
    assert all(a < b for a, b in zip(v.bin_edges, v.bin_edges[1:]))
    assert sum(v.hist_raw) == sum(v.hist_scaled) == n  # the edges cover every score
    assert v.bin_edges[0] == pytest.approx(-v.bin_edges[-1])
    # scaled scores sit in the middle bins: 8 times narrower for head_size 64
    middle = slice(15, 25)  # the central quarter of the range
    assert sum(v.hist_scaled[middle]) == n
    assert sum(v.hist_raw[middle]) < n


def test_variance_is_seeded_and_small_cases_are_finite():
    assert variance(8, 4, 0, 2) == variance(8, 4, 0, 2)
    assert variance(8, 4, 0, 2) != variance(8, 4, 1, 2)
    one = variance(1, 1, 0, 1)  # a single score: variances are reported as 0
    assert one.var_scores_raw == 0.0 and one.ratio == 1.0
    assert sum(one.hist_raw) == 1


# ------------------------------------------------------------------ JSON and validation


def test_results_are_json_ready():
    for result in (bag_of_words(4, 2, 0), softmax_scaling([1, 2, 3], 2), variance(4, 4, 0, 4)):
        d = dataclasses.asdict(result)
        assert only_json_types(d)
        assert json.loads(json.dumps(d, allow_nan=False)) == d


@pytest.mark.parametrize(
    ("call", "argument", "limit"),
    [
        (lambda: bag_of_words(0, 2, 0), "T", "64"),
        (lambda: bag_of_words(65, 2, 0), "T", "64"),
        (lambda: bag_of_words(4, 0, 0), "C", "16"),
        (lambda: bag_of_words(4, 17, 0), "C", "16"),
        (lambda: bag_of_words(4.5, 2, 0), "T", "64"),
        (lambda: bag_of_words(True, 2, 0), "T", "64"),
        (lambda: bag_of_words(4, 2, -1), "seed", "0"),
        (lambda: bag_of_words(4, 2, 0, "normal"), "draw", "'randn'"),
        (lambda: bag_of_words(4, 2, 0, None), "draw", "'rand'"),
        (lambda: bag_of_words(4, 2, 0, "rand", 0), "B", "16"),
        (lambda: bag_of_words(4, 2, 0, "rand", 17), "B", "16"),
        (lambda: variance(0, 4, 0, 4), "head_size", "512"),
        (lambda: variance(513, 4, 0, 4), "head_size", "512"),
        (lambda: variance(8, 65, 0, 4), "T", "64"),
        (lambda: variance(8, 4, 0, 0), "samples", "256"),
        (lambda: variance(8, 4, 0, 257), "samples", "256"),
        (lambda: softmax_scaling([1.0], 0), "factor", "> 0"),
        (lambda: softmax_scaling([1.0], -2), "factor", "> 0"),
        (lambda: softmax_scaling([1.0], float("inf")), "factor", "finite"),
        (lambda: softmax_scaling([1.0], float("nan")), "factor", "finite"),
        (lambda: softmax_scaling([], 1), "logits", "64"),
        (lambda: softmax_scaling([0.0] * 65, 1), "logits", "64"),
        (lambda: softmax_scaling([1.0, float("nan")], 1), "logits", "finite"),
        (lambda: softmax_scaling([1.0, "2"], 1), "logits", "finite"),
        (lambda: softmax_scaling("123", 1), "logits", "64"),
        (lambda: softmax_scaling([1e300, -1e300], 1e10), "factor", "too large"),
    ],
)
def test_bad_arguments_raise_value_error_naming_argument_and_limit(call, argument, limit):
    with pytest.raises(LessonArgumentError) as info:
        call()
    message = str(info.value)
    assert argument in message and limit in message
    assert info.value.field == argument and isinstance(info.value, ValueError)


# ------------------------------------------------------------------ the API field


@pytest.fixture(scope="module")
def lessons_client(tokenizer, tmp_path_factory):
    """The real app over a one-layer random model: the lesson endpoints need a loaded service."""
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from attnscope.model.ours.checkpoint import save_checkpoint
    from attnscope.model.ours.gpt import GPT, GPTConfig
    from fastapi.testclient import TestClient

    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=tokenizer.vocab_size, n_layer=1, n_head=1, n_embd=8))
    path = save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("lessons") / "tiny")
    with TestClient(create_app(Settings(checkpoint=path, device="cpu", torch_threads=1))) as client:
        yield client


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_api_serves_the_notebook_draw(lessons_client, preset):
    draw, seed, _ = PRESETS[preset]
    r = lessons_client.post("/api/lessons/bag-of-words", json={"draw": draw, "seed": seed})
    assert r.status_code == 200, r.text
    data = r.json()
    assert (data["draw"], data["seed"], data["B"], data["T"], data["C"]) == (draw, seed, 4, 8, 2)
    x, xbow, *_ = notebook_cell(draw, seed, 4, 8, 2)
    # the API rounds to 6 significant digits; the notebook prints 4 decimals
    assert torch.allclose(as_tensor(data["x"]), x[0], rtol=1e-5, atol=1e-7)
    assert torch.allclose(as_tensor(data["loop"]), xbow[0], rtol=1e-5, atol=1e-7)


def test_the_api_default_draw_is_uniform_as_before(lessons_client):
    data = lessons_client.post("/api/lessons/bag-of-words", json={}).json()
    assert (data["draw"], data["seed"], data["B"]) == ("rand", 1337, 4)
    torch.manual_seed(1337)
    assert torch.allclose(as_tensor(data["x"]), torch.rand(8, 2), rtol=1e-5)  # what a (T, C) draw gave before B


@pytest.mark.parametrize(
    ("body", "field", "limit"),
    [
        ({"draw": "normal"}, "draw", "'randn'"),
        ({"draw": "RAND"}, "draw", "'rand'"),
        ({"draw": 1}, "draw", "'rand'"),
        ({"B": 0}, "B", 1),
        ({"B": 17}, "B", 16),
        ({"B": 2.0}, "B", None),
    ],
)
def test_the_api_rejects_a_bad_draw_or_batch_naming_the_field(lessons_client, body, field, limit):
    r = lessons_client.post("/api/lessons/bag-of-words", json=body)
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", field]
    if isinstance(limit, str):
        assert limit in item["msg"]
    elif limit is not None:
        assert limit in (item["ctx"] or {}).values()
