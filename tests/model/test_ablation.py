"""Ablation and head effects, with transformers itself as the oracle.

The oracle switches head (l, h) off the way an interpretability notebook would: a forward
pre-hook on the layer's output projection (GPT-2's ``c_proj``, Llama's ``o_proj``) that zeroes
that head's slice of its input. Two models: the GPT-2 export of our GPT (run by our own code)
and a Llama-style grouped-query model (run through the transformers backend).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.ablation import head_effects, mean_outputs  # noqa: E402
from attnscope.model.backends import OursBackend  # noqa: E402
from attnscope.model.ours.gpt import AttentionOptions  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from tests.kit.hooks import CASES, TEXT, head_dim, hooked, model_dirs, out_projection  # noqa: E402, F401


@pytest.fixture(scope="module")
def loaded(model_dirs):  # noqa: F811
    return {name: load_model(path, "cpu") for name, path in model_dirs.items()}


@pytest.fixture(scope="module")
def oracles(model_dirs):  # noqa: F811
    out = {}
    for name, path in model_dirs.items():
        out[name] = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    return out


def oracle_run(model, ids, heads=(), means=None):
    with torch.no_grad(), hooked(model, heads, means):
        out = model(torch.tensor([ids]), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]), out.logits[0]  # (L, nh, T, T), (T, V)


def ours_run(backend, ids, opts):
    traces = []
    logits = backend.run(ids, opts, traces, logits=True)
    return torch.stack([t.pattern[0] for t in traces]), logits




@pytest.mark.parametrize("name", list(CASES))
def test_ablation_equals_a_hook_on_the_output_projection(name, loaded, oracles):
    lm = loaded[name]
    ids = lm.tokenizer.encode_ids(TEXT)
    heads = CASES[name]
    ours_p, ours_logits = ours_run(lm.backend, ids, AttentionOptions(ablate=frozenset(heads)))
    ref_p, ref_logits = oracle_run(oracles[name], ids, heads)
    assert (ours_p - ref_p).abs().max() <= 1e-5
    assert (ours_logits - ref_logits).abs().max() <= 1e-4
    # and it did something: later layers and the predictions moved
    clean_p, clean_logits = oracle_run(oracles[name], ids)
    first = min(layer for layer, _ in heads)
    assert (clean_p[: first + 1] - ref_p[: first + 1]).abs().max() == 0  # up to the ablated layer: untouched
    assert (clean_p[first + 1 :] - ref_p[first + 1 :]).abs().max() > 1e-3
    assert (clean_logits - ref_logits).abs().max() > 1e-3


def test_our_fast_path_ablates_as_the_explicit_one(loaded):
    backend = loaded["gpt2-export"].backend
    assert isinstance(backend, OursBackend)
    ids = backend.tokenizer.encode_ids(TEXT)
    opts = AttentionOptions(ablate=frozenset({(0, 2), (2, 1)}))
    explicit = backend.run(ids, opts, [], logits=True)
    fast = backend.last_logits(torch.tensor([ids]), opts)[0]
    assert (explicit[-1] - fast).abs().max() <= 1e-4


# every model, and ours again with its rows in whole passes (as on a GPU: ablation.resumes)
EFFECT_CASES = [*((name, False) for name in CASES), ("gpt2-export", True)]


@pytest.mark.parametrize(("name", "whole"), EFFECT_CASES)
def test_head_effects_equal_one_hooked_forward_per_head(name, whole, loaded, oracles, monkeypatch):
    from attnscope.model import ablation

    lm = loaded[name]
    model = oracles[name]
    if whole:
        monkeypatch.setattr(ablation, "resumes", lambda backend: False)
    assert ablation.resumes(lm.backend) == (name == "gpt2-export" and not whole)  # each path is taken
    ids = lm.tokenizer.encode_ids(TEXT)
    position = len(ids) - 4
    eff = head_effects(lm.backend, ids, position)
    _, clean = oracle_run(model, ids)
    token = int(clean[position].argmax())
    assert eff.token_id == token
    base = torch.log_softmax(clean[position].double(), -1)[token]
    assert abs(eff.logprob - float(base)) <= 1e-4
    L, nh = lm.facts.n_layer, lm.facts.n_head
    expected = torch.zeros(L, nh, dtype=torch.float64)
    for layer in range(L):
        for h in range(nh):
            _, logits = oracle_run(model, ids, [(layer, h)])
            expected[layer, h] = torch.log_softmax(logits[position].double(), -1)[token] - base
    assert eff.delta.shape == (L, nh)
    assert (eff.delta - expected).abs().max() <= 2e-4
    assert expected.abs().max() > 1e-2  # the heads matter to this prediction


@pytest.mark.parametrize("name", list(CASES))
def test_head_effects_for_a_chosen_token_and_in_small_batches(name, loaded, monkeypatch):
    from attnscope.model import ablation

    lm = loaded[name]
    ids = lm.tokenizer.encode_ids(TEXT)
    whole = head_effects(lm.backend, ids, 5, token_id=7)
    monkeypatch.setattr(ablation, "ROWS_BUDGET_BYTES", 1)  # one row per batch
    one_by_one = head_effects(lm.backend, ids, 5, token_id=7)
    assert whole.token_id == 7
    assert (whole.delta - one_by_one.delta).abs().max() <= 1e-5


@pytest.mark.parametrize("name", list(CASES))
def test_mean_ablation_equals_a_hook_that_writes_the_mean(name, loaded, oracles):
    lm = loaded[name]
    model = oracles[name]
    ids = lm.tokenizer.encode_ids(TEXT)
    hs = head_dim(model)
    # the oracle's means: the output projection's input, averaged over the tokens, per head
    seen = {}
    handles = [
        out_projection(model, layer).register_forward_pre_hook(
            lambda m, args, layer=layer: seen.__setitem__(layer, args[0][0].mean(0))
        )
        for layer in range(lm.facts.n_layer)
    ]
    with torch.no_grad():
        model(torch.tensor([ids]))
    for handle in handles:
        handle.remove()
    means = {layer: seen[layer].view(-1, hs) for layer in seen}  # (nh, hs)
    ours = mean_outputs(lm.backend, ids, AttentionOptions())
    for layer in means:
        assert (ours[layer] - means[layer]).abs().max() <= 1e-5
    position = len(ids) - 1
    eff = head_effects(lm.backend, ids, position, mode="mean")
    layer, h = CASES[name][-1]
    _, clean = oracle_run(model, ids)
    _, logits = oracle_run(model, ids, [(layer, h)], means)
    expected = torch.log_softmax(logits[position].double(), -1) - torch.log_softmax(clean[position].double(), -1)
    assert abs(float(eff.delta[layer, h]) - float(expected[eff.token_id])) <= 2e-4


def test_mean_ablation_on_a_hybrid_takes_each_layers_own_means(loaded, oracles):
    """LFM2 has softmax attention in layers 1 and 3 only: a head of layer 3 mean-ablated takes layer 3's
    means (the means were once kept by attention layer, 0 and 1, and read by layer number)."""
    lm, model = loaded["lfm2"], oracles["lfm2"]
    ids = lm.tokenizer.encode_ids(TEXT)
    hs = head_dim(model)
    assert lm.facts.attention_layers == [1, 3]
    seen = {}
    handles = [
        out_projection(model, layer).register_forward_pre_hook(
            lambda m, args, layer=layer: seen.__setitem__(layer, args[0][0].mean(0).view(-1, hs))
        )
        for layer in lm.facts.attention_layers
    ]
    with torch.no_grad():
        model(torch.tensor([ids]))
    for handle in handles:
        handle.remove()
    ours = mean_outputs(lm.backend, ids, AttentionOptions())
    assert ours[0] is None and ours[2] is None
    for layer in lm.facts.attention_layers:
        assert (ours[layer] - seen[layer]).abs().max() <= 1e-5
    position = len(ids) - 1
    eff = head_effects(lm.backend, ids, position, mode="mean")
    _, clean = oracle_run(model, ids)
    _, logits = oracle_run(model, ids, [(3, 2)], seen)
    expected = torch.log_softmax(logits[position].double(), -1) - torch.log_softmax(clean[position].double(), -1)
    row = lm.facts.attention_layers.index(3)  # delta has a row per attention layer
    assert abs(float(eff.delta[row, 2]) - float(expected[eff.token_id])) <= 2e-4


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_on_a_gpu_ours_measures_head_effects_in_whole_passes_as_the_cpu_does(mode):
    from attnscope.model import ablation

    from tests.kit.hooks import ours_on_cpu_and_gpu

    cpu, gpu = ours_on_cpu_and_gpu()
    assert ablation.resumes(cpu) and not ablation.resumes(gpu)
    ids = torch.randint(0, 97, (20,), generator=torch.Generator().manual_seed(1)).tolist()
    want = head_effects(cpu, ids, 15, token_id=7, mode=mode)
    got = head_effects(gpu, ids, 15, token_id=7, mode=mode)
    assert abs(got.logprob - want.logprob) <= 1e-4
    assert (got.delta - want.delta).abs().max() <= 1e-4
    assert want.delta.abs().max() > 2e-3  # the heads matter to this prediction
