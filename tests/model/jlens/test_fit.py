"""The Jacobian lens against its definition, computed by transformers and autograd alone.

The oracle opens each model with transformers (eager attention, float64), replaces one block's output
with a variable by a forward hook, and takes the full Jacobian of the last block's output
(``torch.autograd.functional.jacobian``, ``(T, C, T, C)``): ``J_l = mean over valid t of Σ_{valid t'}``.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from attnscope.model.atlas.corpus import open_corpus, token_stream  # noqa: E402
from attnscope.model.jlens.build import JLensError, fit_lens  # noqa: E402
from attnscope.model.jlens.fit import prompt_jacobians, prompts  # noqa: E402
from attnscope.model.jlens.lensfile import LensFileError, check_fits, load_lens, save_lens  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.interventions import TEXT, decoder_layers, family_dirs, oracle_model  # noqa: E402, F401

NAMES = ("gpt2-export", "llama", "gemma2")
SKIP = 3
DOCS = [TEXT, "Then the dog sat on the log and the cat saw it.", "A cat. " * 6, "A"]


@pytest.fixture(scope="module")
def loaded(family_dirs):  # noqa: F811
    return {name: load_model(family_dirs[name], "cpu") for name in NAMES}


@pytest.fixture(scope="module")
def oracles(family_dirs):  # noqa: F811
    return {name: oracle_model(family_dirs[name]).double() for name in NAMES}


def definition(model, ids: list[int], layer: int, skip: int) -> torch.Tensor:
    """J_layer of one prompt, (C, C) float64, from the full Jacobian."""
    blocks = decoder_layers(model)
    idx = torch.tensor([ids])
    kept = {}

    def keep(name):
        return lambda m, a, o: kept.__setitem__(name, o[0] if isinstance(o, tuple) else o)

    handles = [blocks[layer].register_forward_hook(keep("x")), blocks[-1].register_forward_hook(keep("final"))]
    with torch.no_grad():
        model(input_ids=idx)
    for h in handles:
        h.remove()

    def last_block_output(x):
        def swap(m, a, o):
            return (x[None], *o[1:]) if isinstance(o, tuple) else x[None]

        handles = [blocks[layer].register_forward_hook(swap), blocks[-1].register_forward_hook(keep("final"))]
        try:
            model(input_ids=idx)
        finally:
            for h in handles:
                h.remove()
        return kept["final"][0]

    jac = torch.autograd.functional.jacobian(last_block_output, kept["x"][0].detach())  # (T, C, T, C): [t', i, t, j]
    T = jac.shape[0]
    earlier = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # [t', t]: t' < t
    assert jac.abs().amax((1, 3))[earlier].max() == 0  # a later position never reaches an earlier output
    upper = ~earlier[:, None, :, None]  # keep only t' >= t, as the definition sums
    return (jac * upper)[skip:, :, skip:, :].sum(0).mean(1)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b).norm() / b.norm())


@pytest.mark.parametrize("name", NAMES)
def test_one_prompt_is_the_definition(name, loaded, oracles):
    lm = loaded[name]
    ids = lm.tokenizer.encode_ids(TEXT)[:20]
    layers = list(range(lm.facts.n_layer - 1))
    got = prompt_jacobians(lm.backend, ids, layers, SKIP, dim_batch=7)  # 7 does not divide d: a short last batch
    for layer in layers:
        ref = definition(oracles[name], ids, layer, SKIP)
        assert relative(got[layer], ref) <= 1e-4, layer
        assert relative(got[layer].half(), ref) <= 5e-3
        assert relative(ref, torch.eye(ref.shape[0], dtype=ref.dtype)) > 0.05  # far from the identity


def _corpus(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS), encoding="utf-8")
    return open_corpus([path])


def test_the_fit_is_the_mean_over_prompts_and_round_trips(tmp_path, loaded, oracles):
    lm, oracle = loaded["llama"], oracles["llama"]
    corpus = _corpus(tmp_path)
    out = fit_lens(lm, corpus, tmp_path / "lens.pt", seq_len=16, skip_first=SKIP, dim_batch=16, progress=False)
    lens = load_lens(out)
    todo = list(prompts(token_stream(corpus.documents(), lm.tokenizer), 16, SKIP))
    assert lens.n_prompts == len(todo) == 3  # "A" has no position at or after skip_first
    assert lens.source_layers == list(range(lm.facts.n_layer - 1)) and lens.d_model == lm.facts.d_model
    for layer in lens.source_layers:
        ref = torch.stack([definition(oracle, ids, layer, SKIP) for ids in todo]).mean(0)
        assert lens.J[layer].dtype == torch.float16
        assert relative(lens.J[layer], ref) <= 5e-3
    assert lens.metadata["model"] == lm.facts.name and lens.metadata["settings"]["skip_first"] == SKIP
    check_fits(lens, lm.facts)


def test_an_interrupted_fit_resumes_to_the_same_lens(tmp_path, loaded):
    lm = loaded["gpt2-export"]
    corpus = _corpus(tmp_path)
    whole = load_lens(fit_lens(lm, corpus, tmp_path / "whole.pt", seq_len=16, skip_first=SKIP, progress=False))

    def stop_after_two(acc):
        if acc.n_prompts == 2:
            raise KeyboardInterrupt

    out = tmp_path / "cut" / "lens.pt"  # a folder that does not exist yet
    kw = {"seq_len": 16, "skip_first": SKIP, "progress": False}  # checkpoints every 8: the interrupt saves
    with pytest.raises(KeyboardInterrupt):
        fit_lens(lm, corpus, out, after_prompt=stop_after_two, **kw)
    assert not out.exists() and out.with_name("lens.pt.partial").is_file()
    with pytest.raises(JLensError, match="--resume"):
        fit_lens(lm, corpus, out, **kw)
    with pytest.raises(JLensError, match="skip_first"):
        fit_lens(lm, corpus, out, resume=True, **{**kw, "skip_first": SKIP + 1})
    resumed = load_lens(fit_lens(lm, corpus, out, resume=True, **kw))
    assert resumed.n_prompts == whole.n_prompts
    for layer in whole.source_layers:
        assert torch.equal(resumed.J[layer], whole.J[layer])
    assert not out.with_name("lens.pt.partial").exists()
    # a fit capped at 2 prompts, interrupted after 1 and resumed, stops at 2 in all
    two = load_lens(fit_lens(lm, corpus, tmp_path / "two.pt", max_prompts=2, **kw))

    def stop_after_one(acc):
        if acc.n_prompts == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit_lens(lm, corpus, tmp_path / "two-cut.pt", max_prompts=2, after_prompt=stop_after_one, **kw)
    again = load_lens(fit_lens(lm, corpus, tmp_path / "two-cut.pt", max_prompts=2, resume=True, **kw))
    assert again.n_prompts == two.n_prompts == 2
    assert all(torch.equal(again.J[layer], two.J[layer]) for layer in two.source_layers)


def test_bad_settings_are_one_line(tmp_path, loaded):
    lm = loaded["gpt2-export"]
    corpus = _corpus(tmp_path)
    for kw, field in [
        ({"skip_first": 20, "seq_len": 16}, "--seq-len"),
        ({"seq_len": 10_000}, "--seq-len"),
        ({"layers": [lm.facts.n_layer - 1]}, "--layers"),
        ({"dim_batch": 0}, "--dim-batch"),
    ]:
        with pytest.raises(JLensError, match=field) as e:
            fit_lens(lm, corpus, tmp_path / "x.pt", progress=False, **kw)
        assert "\n" not in str(e.value)


def test_bad_lens_files_are_one_line_naming_the_file(tmp_path, loaded):
    facts = loaded["llama"].facts
    d = facts.d_model
    good = save_lens(tmp_path / "good.pt", {0: torch.eye(d)}, 5, {})
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    torch.save({"J": {0: torch.eye(d + 1)}, "n_prompts": 1, "source_layers": [0], "d_model": d}, tmp_path / "shape.pt")
    torch.save({"J": {0: object()}}, tmp_path / "pickle.pt")
    torch.save({"J": {0: torch.eye(d)}, "source_layers": [0, 1], "d_model": d}, tmp_path / "layers.pt")
    for name, words in [("missing.pt", "no such"), ("junk.pt", "not a Jacobian lens"), ("shape.pt", r"J\[0\] is"),
                        ("pickle.pt", "not a Jacobian lens"), ("layers.pt", "source_layers")]:
        with pytest.raises(LensFileError, match=words) as e:
            load_lens(tmp_path / name)
        assert str(tmp_path / name) in str(e.value) and "\n" not in str(e.value)
    other = save_lens(tmp_path / "wide.pt", {0: torch.eye(d * 2)}, 1, {})
    with pytest.raises(LensFileError, match=f"d_model {d * 2}.*d_model {d}"):
        check_fits(load_lens(other), facts)
    deep = save_lens(tmp_path / "deep.pt", {facts.n_layer + 3: torch.eye(d)}, 1, {})
    with pytest.raises(LensFileError, match=f"layer {facts.n_layer + 3}"):
        check_fits(load_lens(deep), facts)
    check_fits(load_lens(good), facts)


def test_a_published_lens_without_our_metadata_reads(tmp_path, loaded):
    """The published format alone (string layer keys as some writers leave them, no metadata) reads back."""
    d = loaded["llama"].facts.d_model
    J = {str(layer): torch.eye(d, dtype=torch.float16) * (layer + 2) for layer in (0, 1)}
    torch.save({"J": J, "n_prompts": 3000, "source_layers": [0, 1], "d_model": d}, tmp_path / "published.pt")
    lens = load_lens(tmp_path / "published.pt")
    assert lens.source_layers == [0, 1] and lens.n_prompts == 3000 and lens.metadata == {}
    assert torch.equal(lens.J[1], torch.eye(d, dtype=torch.float16) * 3)
    check_fits(lens, loaded["llama"].facts)


def test_a_lens_in_the_local_hub_cache_is_found_by_repo_and_file(tmp_path, monkeypatch, loaded):
    from attnscope.model.jlens.lensfile import resolve_lens

    from tests.kit.hub import put_in_cache

    d = loaded["llama"].facts.d_model
    folder = tmp_path / "repo"
    folder.mkdir()
    save_lens(folder / "llama-lens.pt", {0: torch.eye(d)}, 9, {"model": "published"})
    put_in_cache(tmp_path / "hub", "someone/jacobian-lenses", folder)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lens = load_lens(resolve_lens("someone/jacobian-lenses:llama-lens.pt"))
    assert lens.n_prompts == 9 and lens.source_layers == [0]
    with pytest.raises(LensFileError, match="not in the local Hugging Face cache") as e:
        resolve_lens("someone/jacobian-lenses:other.pt")
    assert "hf download someone/jacobian-lenses other.pt" in str(e.value)
    assert resolve_lens(folder / "llama-lens.pt") == folder / "llama-lens.pt"  # a path stays a path
