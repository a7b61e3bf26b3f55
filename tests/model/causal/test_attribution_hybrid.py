"""Direct logit attribution on a hybrid (Bamba: Mamba-2 beside softmax attention; Jamba: Mamba-1 and MoE),
with a separate transformers load and hooks as the oracle (:func:`tests.kit.implicit.expected_hybrid_attribution`):
each softmax head's write, each mixer layer's write as one component, each MLP's, the embeddings'.
A hybrid whose mixers are not worked out (Qwen3-Next) is refused by name in test_attribution.py."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from attnscope.model.causal.attribution import attribute  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402

from tests.kit.family import random_download  # noqa: E402
from tests.kit.implicit import BAMBA, JAMBA, expected_hybrid_attribution  # noqa: E402

TEXT = "The cat sat on the mat. Then the dog saw the cat."
HYBRIDS = {"bamba": (BAMBA, "mamba2"), "jamba": (JAMBA, "mamba1")}


@pytest.fixture(scope="module")
def hybrids(tmp_path_factory):
    root = tmp_path_factory.mktemp("hybrid-attr")
    dirs = {name: random_download(root / name, name, **cfg) for name, (cfg, _) in HYBRIDS.items()}
    return {name: (path, load_model(path, "cpu").backend) for name, path in dirs.items()}


@pytest.mark.parametrize("name", list(HYBRIDS))
@pytest.mark.parametrize("token", [None, 7])
def test_a_hybrid_splits_into_heads_mixers_and_mlps_adding_up_to_the_logit(name, token, hybrids):
    path, backend = hybrids[name]
    ids = backend.tokenizer.encode_ids(TEXT)
    position = len(ids) - 2
    got = attribute(backend, ids, position, token)
    want = expected_hybrid_attribution(path, ids, position, got.token_id)
    scale = 1e-4 * (1.0 + got.heads.abs().max().item() + got.mlps.abs().max().item())
    attention = backend.facts.attention_layers
    assert got.heads.shape == (len(attention), backend.facts.n_head)
    assert (got.heads - want["heads"]).abs().max() <= scale
    assert (got.mlps - want["mlps"]).abs().max() <= scale
    assert abs(got.embed - want["embed"]) <= scale
    assert [i for i, m in enumerate(got.mixers) if m is not None] == sorted(want["mixers"])
    assert all(i not in attention for i in want["mixers"])
    for i, value in want["mixers"].items():
        assert got.mixers[i] == pytest.approx(value, abs=scale)
    total = got.heads.sum().item() + got.mlps.sum().item() + got.embed + got.rest
    total += sum(m for m in got.mixers if m is not None)
    assert total == pytest.approx(got.logit, abs=1e-4 * (1.0 + abs(got.logit)))
    assert got.logit == pytest.approx(want["logit"], abs=1e-4 * (1.0 + abs(got.logit)))
    assert f"({HYBRIDS[name][1]})" in got.unsplit and "not split per head" in got.unsplit
