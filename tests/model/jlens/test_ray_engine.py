"""The fit on Ray (shards of prompts on tasks, merged on the driver in order) gives the local fit's lens."""

from __future__ import annotations

import pytest
import torch
from attnscope.model.jlens.build import fit_lens
from attnscope.model.jlens.lensfile import load_lens

from tests.app.cli.test_atlas import corpus_files
from tests.kit.app import build_checkpoint

ray = pytest.importorskip("ray", reason="the Ray engine needs ray (pip install 'attnscope[ray]')")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_gives_the_local_fit(local_ray, tmp_path):
    from attnscope.model.atlas.corpus import open_corpus
    from attnscope.model.registry import load_model

    lm = load_model(build_checkpoint(tmp_path / "ckpt"), "cpu")
    txt, jsonl, _ = corpus_files(tmp_path / "docs")
    corpus = open_corpus([txt, jsonl])
    opts = {"skip_first": 2, "dim_batch": 8, "checkpoint_every": 4, "progress": False}  # shards of 4 and 2
    here = load_lens(fit_lens(lm, corpus, tmp_path / "local.pt", **opts))
    seen = []
    there = load_lens(fit_lens(lm, corpus, tmp_path / "ray.pt", engine="ray", after_prompt=lambda a: seen.append(
        a.n_prompts), **opts))
    assert seen == [4, 6] and here.n_prompts == there.n_prompts == 6  # two shards, merged in order
    for layer in here.source_layers:
        torch.testing.assert_close(there.J[layer].float(), here.J[layer].float(), rtol=2e-3, atol=1e-4)
