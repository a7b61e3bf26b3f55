"""The atlas's Ray engine on a local Ray (2 CPUs): the same atlas as the local engine."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from attnscope.model.atlas.build import atlas
from attnscope.model.atlas.read import EXEMPLARS_FILE, HEADS_FILE, read_atlas
from attnscope.model.registry import load_model

from tests.kit.atlas import ENGLISH_DOCS, write_docs
from tests.kit.family import build
from tests.kit.hub import change_layer, copy_with

ray = pytest.importorskip("ray", reason="the Ray engine needs ray (pip install 'attnscope[ray]')")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")  # Ray Data's own settings, not ours



@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def local_and_ray(corpus, tmp_path, **opts):
    """The atlas of ``corpus`` by the local engine and by Ray (two actors): both read back, after
    checking that every metric and the exemplars' rows agree (values to float rounding)."""
    atlas(corpus, tmp_path / "local", **opts)
    atlas(corpus, tmp_path / "ray", engine="ray", concurrency=2, **opts)
    here, there = read_atlas(tmp_path / "local"), read_atlas(tmp_path / "ray")
    for m in here.metrics:
        np.testing.assert_allclose(there.maps[m], here.maps[m], rtol=1e-9, atol=1e-12, err_msg=m)
        np.testing.assert_allclose(there.std[m], here.std[m], rtol=1e-9, atol=1e-12, err_msg=m)
        assert np.array_equal(there.histograms[m], here.histograms[m]), m
        assert np.array_equal(there.counts[m], here.counts[m]), m
    # the exemplars: the same rows (their values up to the forward passes' float rounding)
    a, b = pq.read_table(tmp_path / "local" / EXEMPLARS_FILE), pq.read_table(tmp_path / "ray" / EXEMPLARS_FILE)
    assert a.drop(["value"]).equals(b.drop(["value"]))
    np.testing.assert_allclose(a["value"].to_numpy(), b["value"].to_numpy(), rtol=1e-6)
    return here, there


def test_ray_gives_the_local_engines_atlas(local_ray, tmp_path):
    corpus = write_docs(tmp_path / "docs.txt", ENGLISH_DOCS * 3)
    lm = load_model(None, "cpu")
    here, there = local_and_ray(corpus, tmp_path, model=lm, seq_len=32, batch_size=3, exemplars=4)
    assert there.meta["settings"]["engine"] == "ray" and there.meta["batches"] == here.meta["batches"] > 2
    assert (
        pq.read_table(tmp_path / "ray" / HEADS_FILE).num_rows
        == pq.read_table(tmp_path / "local" / HEADS_FILE).num_rows
    )


def test_ray_gives_the_local_engines_divergence(local_ray, tmp_path):
    """With a compare model (a tiny Llama and a copy with layer 1's q/k changed), each actor loads both
    models: every metric, ``divergence`` with them, equals the local engine's."""
    base = build("llama", tmp_path / "base")
    tuned = copy_with(base, tmp_path / "tuned", lambda m: change_layer(m, 1))
    corpus = write_docs(tmp_path / "docs.txt", ENGLISH_DOCS * 3)
    opts = dict(model=load_model(base, "cpu"), compare_model=tuned, seq_len=24, batch_size=3, exemplars=4)
    here, there = local_and_ray(corpus, tmp_path, **opts)
    assert "divergence" in here.metrics and there.metrics == here.metrics and there.meta["batches"] > 2
    assert (here.maps["divergence"][1] > 0).all()


def test_a_ray_run_prints_only_the_atlas_on_stderr(tmp_path):
    """``attnscope atlas --engine ray`` as a user runs it, Ray started by the atlas on this machine:
    its stderr holds no warning or error line of Ray's C++ core worker (``[date time E pid tid]
    core_worker.cc:...``), no token-authentication notice and no Ray Python log line at INFO or
    above (the atlas's bar is off: no terminal). Ray's own C++ INFO line saying that it took its log
    level from ``RAY_BACKEND_LOG_LEVEL`` remains (Ray prints it whenever that variable is set)."""
    corpus = write_docs(tmp_path / "docs.txt", ENGLISH_DOCS * 3)
    run = subprocess.run(
        [sys.executable, "-m", "attnscope.app.cli.main", "atlas",
         "--corpus", str(corpus), "--out", str(tmp_path / "out"),
         "--seq-len", "32", "--batch-size", "3", "--engine", "ray"],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr
    # C++ lines at W, E or F; Python log lines at INFO and above; anything on authentication
    ray_lines = [line for line in run.stderr.splitlines()
                 if re.search(r"^\[\S+ \S+ [WEF] \d+|\b(INFO|WARNING|ERROR)\b|[Aa]uthenticat", line)]
    assert ray_lines == []
    assert read_atlas(tmp_path / "out").meta["complete"]
