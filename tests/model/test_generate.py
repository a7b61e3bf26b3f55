"""Generation with a key/value cache: greedy equals transformers' ``generate(do_sample=False)``
token for token, each step's attention row is the full forward pass's row, and sums to 1."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.ablation import Done, Step, generate, nucleus  # noqa: E402
from attnscope.model.backends import OursBackend  # noqa: E402
from attnscope.model.ours.gpt import AttentionOptions  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.family import build  # noqa: E402
from tests.kit.hooks import PROMPT, hf_greedy, model_dirs  # noqa: E402, F401


@pytest.fixture(scope="module")
def gen_dirs(model_dirs, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("gen")
    return {**model_dirs, "gemma2": build("gemma2", root / "gemma2")}  # sliding window + softcap


@pytest.fixture(scope="module")
def loaded(gen_dirs):
    return {name: load_model(path, "cpu") for name, path in gen_dirs.items()}


def run(backend, ids, n, **kw):
    steps = list(generate(backend, ids, n, **kw))
    assert isinstance(steps[-1], Done) and all(isinstance(s, Step) for s in steps[:-1])
    return steps[:-1], steps[-1]


@pytest.mark.parametrize("name", ["gpt2-export", "llama", "gemma2"])
def test_greedy_equals_transformers_generate(name, gen_dirs, loaded):
    lm = loaded[name]
    ids = lm.tokenizer.encode_ids(PROMPT)
    steps, done = run(lm.backend, ids, 24)
    expected = hf_greedy(gen_dirs[name], ids, 24)
    assert [s.token_id for s in steps] == expected
    assert done.generated == expected
    assert done.reason == ("eos" if len(expected) < 24 else "length")


@pytest.mark.parametrize("name", ["gpt2-export", "llama"])
def test_greedy_with_heads_switched_off_equals_hooked_generate(name, gen_dirs, loaded):
    lm = loaded[name]
    ids = lm.tokenizer.encode_ids(PROMPT)
    heads = [(0, 1), (1, 0)]
    steps, _ = run(lm.backend, ids, 12, opts=AttentionOptions(ablate=frozenset(heads)))
    assert [s.token_id for s in steps] == hf_greedy(gen_dirs[name], ids, 12, heads)


@pytest.mark.parametrize("name", ["gpt2-export", "llama", "gemma2"])
def test_each_step_is_the_full_forward_pass(name, loaded):
    """With the cache, step k's logits and attention rows equal a whole forward pass over the
    prompt and the k − 1 tokens before it: the row of its last position, over every earlier token."""
    lm = loaded[name]
    ids = lm.tokenizer.encode_ids(PROMPT)
    steps, done = run(lm.backend, ids, 10)
    for s in steps:
        seq = done.ids[: len(ids) + s.step - 1]
        traces = []
        logits = lm.backend.run(seq, AttentionOptions(), traces, logits=True)
        full = torch.stack([t.pattern[0, :, -1] for t in traces])  # (L, nh, S)
        assert s.attention.shape == full.shape == (lm.facts.n_layer, lm.facts.n_head, len(seq))
        assert (s.attention - full).abs().max() <= 1e-5
        torch.testing.assert_close(s.attention.sum(-1), torch.ones(lm.facts.n_layer, lm.facts.n_head))
        probs = torch.softmax(logits[-1].double(), -1)
        assert abs(s.prob - float(probs[s.token_id])) <= 1e-5
        assert s.top_ids[0] == int(probs.argmax()) and s.top_probs == sorted(s.top_probs, reverse=True)


def test_our_cache_is_one_token_of_work_per_step(loaded):
    """After the prompt, every step feeds the model exactly one token."""
    backend = loaded["gpt2-export"].backend
    assert isinstance(backend, OursBackend)
    fed = []
    original = backend.step

    def spy(ids, cache, opts):
        fed.append(len(ids))
        return original(ids, cache, opts)

    backend.step = spy
    try:
        ids = backend.tokenizer.encode_ids(PROMPT)
        run(backend, ids, 8)
    finally:
        del backend.step
    assert fed[0] == len(ids) and set(fed[1:]) == {1}


@pytest.mark.parametrize("name", ["gpt2-export", "llama"])
def test_a_generation_that_fills_the_context_stops_there(name, loaded):
    lm = loaded[name]
    block = lm.facts.block_size
    ids = (lm.tokenizer.encode_ids(PROMPT) * block)[: block - 3]
    steps, done = run(lm.backend, ids, 20)
    assert len(steps) == 3 and len(done.ids) == block
    assert done.reason == "context"
    steps, done = run(lm.backend, ids + [ids[0]] * 3, 5)
    assert steps == [] and done.reason == "context"


def test_sampling_is_seeded(loaded):
    backend = loaded["llama"].backend
    ids = backend.tokenizer.encode_ids(PROMPT)
    a = [s.token_id for s in run(backend, ids, 12, do_sample=True, seed=3, temperature=2.0)[0]]
    b = [s.token_id for s in run(backend, ids, 12, do_sample=True, seed=3, temperature=2.0)[0]]
    c = [s.token_id for s in run(backend, ids, 12, do_sample=True, seed=4, temperature=2.0)[0]]
    greedy = [s.token_id for s in run(backend, ids, 12)[0]]
    top1 = [s.token_id for s in run(backend, ids, 12, do_sample=True, seed=5, top_k=1)[0]]
    assert a == b and a != c
    assert top1 == greedy


def test_the_nucleus_is_what_transformers_top_p_keeps():
    """Top-p against transformers' own TopPLogitsWarper, over peaky and flat distributions."""
    from transformers.generation.logits_process import TopPLogitsWarper

    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        logits = torch.randn(64, generator=g, dtype=torch.float64) * (0.5 + trial % 6)
        top_p = 0.01 + 0.98 * float(torch.rand(1, generator=g))
        kept = torch.isfinite(TopPLogitsWarper(top_p=top_p)(None, logits[None].clone())[0])
        assert torch.equal(nucleus(torch.softmax(logits, -1), top_p), kept), (trial, top_p)


def test_top_p_samples_only_inside_the_nucleus(loaded):
    backend = loaded["llama"].backend
    ids = backend.tokenizer.encode_ids(PROMPT)
    for seed in range(4):
        steps, _ = run(backend, ids, 8, do_sample=True, seed=seed, temperature=2.0, top_p=0.3)
        for s in steps:
            # the mass of the tokens likelier than the one drawn is under top_p
            likelier = sum(p for i, p in zip(s.top_ids, s.top_probs) if p > s.prob and i != s.token_id)
            assert likelier < 0.3 + 1e-9
    whole = [s.token_id for s in run(backend, ids, 10, do_sample=True, seed=9, temperature=2.0, top_p=1.0)[0]]
    plain = [s.token_id for s in run(backend, ids, 10, do_sample=True, seed=9, temperature=2.0)[0]]
    assert whole == plain
