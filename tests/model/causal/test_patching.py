"""Activation patching against hooked transformers runs: the corrupt run with the clean slice written in
(a forward pre-hook on o_proj / c_proj for a head, a forward hook on the decoder layer for the residual)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.causal import patching as patching_module  # noqa: E402
from attnscope.model.causal.patching import PatchingError, patching  # noqa: E402

from tests.kit.hooks import head_dim  # noqa: E402
from tests.kit.interventions import (  # noqa: E402, F401
    FAMILIES,
    TEXT,
    family_dirs,
    head_inputs,
    head_patched,
    layer_outputs,
    oracle_logits,
    oracles,
    residual_patched,
)


def pair(lm, n: int = 16) -> tuple[list[int], list[int]]:
    """A clean text and a corrupt one: the same tokens but two, of the first ``n`` tokens of :data:`TEXT`."""
    clean = lm.tokenizer.encode_ids(TEXT)[:n]
    corrupt = list(clean)
    corrupt[n - 5], corrupt[n - 9] = clean[n - 9], clean[n - 5]
    assert corrupt != clean
    return clean, corrupt


def diff(logits: torch.Tensor, token: int, foil: int) -> float:
    return float(logits[-1, token].double() - logits[-1, foil].double())


def expected_defaults(model, clean, corrupt):
    lc, lx = oracle_logits(model, clean), oracle_logits(model, corrupt)
    token, foil = int(lc[-1].argmax()), int(lx[-1].argmax())
    if token == foil:  # the runs agree on the top guess: the corrupt run's second guess as the foil
        foil = int(torch.topk(lx[-1], 2).indices[1])
    return token, foil, diff(lc, token, foil), diff(lx, token, foil)


def whole_passes(monkeypatch, whole: bool) -> None:
    """With ``whole``, ours runs its rows as whole passes, as on a GPU (:func:`patching_module.resumes`)."""
    if whole:
        monkeypatch.setattr(patching_module, "resumes", lambda backend: False)


# every family, and ours again with the rows of every layer in whole passes (a GPU's way)
HEAD_CASES = [*((name, False) for name in FAMILIES), ("gpt2-export", True)]


@pytest.mark.parametrize(("name", "whole"), HEAD_CASES)
def test_head_patching_equals_a_pre_hook_writing_the_clean_slice(name, whole, loaded, oracles, monkeypatch):  # noqa: F811
    lm, model = loaded[name], oracles[name]
    whole_passes(monkeypatch, whole)
    assert patching_module.resumes(lm.backend) == (name == "gpt2-export" and not whole)  # each path is taken
    clean, corrupt = pair(lm)
    token, foil, clean_diff, corrupt_diff = expected_defaults(model, clean, corrupt)
    got = patching(lm.backend, clean, corrupt, len(clean) - 1, token, foil, what="heads")
    assert abs(got.clean_diff - clean_diff) <= 1e-4 and abs(got.corrupt_diff - corrupt_diff) <= 1e-4
    hs = head_dim(model)
    inputs = head_inputs(model, clean)  # per layer (T, nh · hs)
    expected = torch.zeros(lm.facts.n_layer, lm.facts.n_head, dtype=torch.float64)
    for layer in range(lm.facts.n_layer):
        for h in range(lm.facts.n_head):
            with head_patched(model, layer, h, inputs[layer][:, h * hs : (h + 1) * hs]):
                patched = diff(oracle_logits(model, corrupt), token, foil)
            expected[layer, h] = (patched - corrupt_diff) / (clean_diff - corrupt_diff)
    assert (got.restored - expected).abs().max() <= 1e-3
    assert expected.abs().max() > 1e-2  # some head matters


RESIDUAL_CASES = [*((name, False) for name in ("gpt2-export", "llama", "gemma2", "gpt_oss")), ("gpt2-export", True)]


@pytest.mark.parametrize(("name", "whole"), RESIDUAL_CASES)
def test_residual_patching_equals_a_hook_writing_the_clean_position(name, whole, loaded, oracles, monkeypatch):  # noqa: F811
    lm, model = loaded[name], oracles[name]
    whole_passes(monkeypatch, whole)
    clean, corrupt = pair(lm, 12)
    position = len(clean) - 2  # the last token is after it: it restores nothing
    token, foil, clean_diff, corrupt_diff = expected_defaults(model, clean[: position + 1], corrupt[: position + 1])
    got = patching(lm.backend, clean, corrupt, position, token, foil, what="residual")
    outputs = layer_outputs(model, clean)  # per layer (T, C)
    expected = torch.zeros(lm.facts.n_layer, len(clean), dtype=torch.float64)
    for layer in range(lm.facts.n_layer):
        for p in range(len(clean)):
            with residual_patched(model, layer, p, outputs[layer][p]):
                patched = diff(oracle_logits(model, corrupt)[: position + 1], token, foil)
            expected[layer, p] = (patched - corrupt_diff) / (clean_diff - corrupt_diff)
    assert got.restored.shape == (lm.facts.n_layer, len(clean))
    assert (got.restored - expected).abs().max() <= 1e-3
    assert abs(float(got.restored[-1, position]) - 1) <= 1e-4  # the whole clean stream at the end: all of it
    assert (got.restored[:, position + 1 :] == 0).all()


@pytest.mark.parametrize("name", ["gpt2-export", "llama"])
@pytest.mark.parametrize("what", ["heads", "residual"])
def test_small_batches_give_the_same_shares(name, what, loaded, monkeypatch):  # noqa: F811
    lm = loaded[name]
    clean, corrupt = pair(lm)
    whole = patching(lm.backend, clean, corrupt, len(clean) - 1, 7, 8, what=what)
    monkeypatch.setattr(patching_module, "rows_per_batch", lambda *a: 1)  # one row per batch
    one_by_one = patching(lm.backend, clean, corrupt, len(clean) - 1, 7, 8, what=what)
    span = abs(whole.clean_diff - whole.corrupt_diff)  # the shares differ by float32 noise in the logits over this
    assert ((whole.restored - one_by_one.restored) * span).abs().max() <= 1e-5


def test_a_foil_equal_to_the_token_is_refused(loaded):  # noqa: F811
    lm = loaded["llama"]
    clean, corrupt = pair(lm)
    with pytest.raises(PatchingError) as e:
        patching(lm.backend, clean, corrupt, len(clean) - 1, token_id=7, foil_id=7)
    assert e.value.field == "foil_id"
    with pytest.raises(PatchingError) as e:
        patching(lm.backend, clean, clean, len(clean) - 1, token_id=7, foil_id=8)
    assert e.value.field == "corrupt"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("what", ["heads", "residual"])
def test_on_a_gpu_ours_patches_in_whole_passes_with_the_cpus_shares(what):
    from tests.kit.hooks import ours_on_cpu_and_gpu

    cpu, gpu = ours_on_cpu_and_gpu()
    assert patching_module.resumes(cpu) and not patching_module.resumes(gpu)
    g = torch.Generator().manual_seed(1)
    clean, corrupt = (torch.randint(0, 97, (20,), generator=g).tolist() for _ in range(2))
    want = patching(cpu, clean, corrupt, 19, 7, 8, what=what)
    got = patching(gpu, clean, corrupt, 19, 7, 8, what=what)
    span = abs(want.clean_diff - want.corrupt_diff)
    assert ((got.restored - want.restored) * span).abs().max() <= 1e-4
    assert want.restored.abs().max() > 1e-2  # something is restored
