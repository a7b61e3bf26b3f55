"""The atlas's ``divergence`` (``--compare-model``): over a corpus, per head, its mean, std, count,
histogram and exemplars equal a direct computation from transformers' eager ``output_attentions`` of
both models (a tiny Llama and a copy with one layer's q/k weights changed); the layers before the
change read exactly 0; a second model of another shape or tokenizer is refused in one line."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from attnscope.app.cli.main import main
from attnscope.model.atlas.build import atlas
from attnscope.model.atlas.divergence import ModelMismatch
from attnscope.model.atlas.metrics import bin_index
from attnscope.model.atlas.read import EXEMPLARS_FILE, read_atlas
from attnscope.model.registry import load_model

pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM  # noqa: E402

from tests.kit.atlas import ENGLISH_DOCS, js_rows, reference_windows, write_docs  # noqa: E402
from tests.kit.family import build  # noqa: E402
from tests.kit.hub import change_layer, copy_with  # noqa: E402

DOCS = [*ENGLISH_DOCS, "When the rain stopped, the children went outside and played until dinner was ready."]
SEQ_LEN, BATCH, K = 20, 2, 4
CHANGED = 1  # the layer whose q/k weights the copy changes
TOL = 5e-6


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(base folder, changed copy's folder, a copy with fewer layers)."""
    root = tmp_path_factory.mktemp("divergence-models")
    base = build("llama", root / "base")
    tuned = copy_with(base, root / "tuned", lambda m: change_layer(m, CHANGED))
    shallow = copy_with(base, root / "shallow", num_hidden_layers=2)
    return base, tuned, shallow


def eager(path, ids: list[int]) -> np.ndarray:
    """(L, nh, T, T) float64: transformers' eager attention of one window."""
    ref = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    with torch.no_grad():
        out = ref(torch.tensor([ids]), output_attentions=True)
    return torch.stack(out.attentions, dim=1)[0].double().numpy()


def reference(base, tuned, tokenizer):
    """(L, nh, R) JS of every query row t >= 1 of every window, and each row's (window, position)."""
    values, where = [], []
    for w, ids in enumerate(reference_windows(tokenizer, DOCS, SEQ_LEN)):
        values.append(js_rows(eager(base, ids), eager(tuned, ids))[..., 1:])
        where += [(w, t) for t in range(1, len(ids))]
    return np.concatenate(values, axis=-1), where


def test_divergence_equals_eager_attention_of_both(pair, tmp_path):
    base, tuned, _ = pair
    lm = load_model(base, "cpu")
    corpus = write_docs(tmp_path / "docs.txt", DOCS)
    atlas(corpus, tmp_path / "out", model=lm, compare_model=tuned, seq_len=SEQ_LEN, batch_size=BATCH, exemplars=K)
    got = read_atlas(tmp_path / "out")
    v, where = reference(base, tuned, lm.tokenizer)
    assert "divergence" in got.metrics and got.meta["compare_model"]["path"] == str(tuned)
    assert (got.counts["divergence"] == v.shape[-1]).all()
    np.testing.assert_allclose(got.maps["divergence"], v.mean(-1), rtol=0, atol=TOL)
    np.testing.assert_allclose(got.std["divergence"], v.std(-1), rtol=0, atol=TOL)
    # the histogram: each row in its bin, but for rows within TOL of an edge, which float32 may put either side
    nb = len(got.bin_edges["divergence"]) - 1
    want = np.stack([[np.bincount(b, minlength=nb) for b in layer] for layer in bin_index(v, "divergence")])
    near = bin_index(v - TOL, "divergence") != bin_index(v + TOL, "divergence")
    assert (np.abs(got.histograms["divergence"] - want).sum(-1) <= 2 * near.sum(-1)).all()
    assert (got.histograms["divergence"].sum(-1) == v.shape[-1]).all()
    # the layers before the change read exactly 0; the changed one does not
    assert (got.maps["divergence"][:CHANGED] == 0).all() and (got.std["divergence"][:CHANGED] == 0).all()
    assert (got.maps["divergence"][CHANGED] > 1e-4).all()
    # the exemplars: the K rows where the two models disagree most
    for li, layer in enumerate(got.layers):
        for h in range(lm.facts.n_head):
            rows = got.exemplars[(layer, h)]["divergence"]
            top = np.sort(v[li, h])[::-1][:K]
            assert [r["rank"] for r in rows] == list(range(K))
            for r, best in zip(rows, top):
                assert abs(r["value"] - best) <= TOL
                assert abs(v[li, h, where.index((r["window"], r["position"]))] - r["value"]) <= TOL
    # the pattern's own metrics are the atlas's model's, as without a compare model
    atlas(corpus, tmp_path / "alone", model=lm, seq_len=SEQ_LEN, batch_size=BATCH, exemplars=K)
    alone = read_atlas(tmp_path / "alone")
    assert [m for m in got.metrics if m != "divergence"] == alone.metrics
    for m in alone.metrics:
        assert np.array_equal(got.maps[m], alone.maps[m], equal_nan=True), m


def test_resume_keeps_the_compare_model(pair, tmp_path):
    base, tuned, _ = pair
    lm = load_model(base, "cpu")
    corpus = write_docs(tmp_path / "docs.txt", DOCS)
    opts = dict(model=lm, seq_len=SEQ_LEN, batch_size=BATCH, exemplars=K, progress=False)

    def stop(tally):
        if tally.batches == 2:
            raise KeyboardInterrupt

    atlas(corpus, tmp_path / "whole", compare_model=tuned, **opts)
    with pytest.raises(KeyboardInterrupt):
        atlas(corpus, tmp_path / "cut", compare_model=tuned, after_batch=stop, **opts)
    with pytest.raises(ValueError, match="compare model"):  # another compare model (none) cannot continue it
        atlas(corpus, tmp_path / "cut", resume=True, **opts)
    atlas(corpus, tmp_path / "cut", compare_model=tuned, resume=True, **opts)
    a, b = read_atlas(tmp_path / "whole"), read_atlas(tmp_path / "cut")
    for m in a.metrics:
        assert np.array_equal(a.maps[m], b.maps[m], equal_nan=True), m
    assert (tmp_path / "cut" / EXEMPLARS_FILE).read_bytes() == (tmp_path / "whole" / EXEMPLARS_FILE).read_bytes()


def test_another_shape_is_refused_before_anything_is_written(pair, tmp_path):
    base, _, shallow = pair
    corpus = write_docs(tmp_path / "docs.txt", DOCS)
    with pytest.raises(ModelMismatch, match="attention layers"):
        atlas(corpus, tmp_path / "out", checkpoint=base, compare_model=shallow, seq_len=SEQ_LEN)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("which", ["shallow", "other-tokenizer", "missing"])
def test_the_command_refuses_a_bad_compare_model_in_one_line(pair, tmp_path, capsys, which):
    base, _, shallow = pair
    corpus = write_docs(tmp_path / "docs.txt", DOCS)
    if which == "other-tokenizer":  # the same model, two of the corpus's tokens given each other's ids
        other = copy_with(base, tmp_path / "other")
        spec = json.loads((base / "tokenizer.json").read_text())
        vocab = spec["model"]["vocab"]
        vocab["▁cat"], vocab["▁dog"] = vocab["▁dog"], vocab["▁cat"]
        (other / "tokenizer.json").write_text(json.dumps(spec))
    else:
        other = shallow if which == "shallow" else tmp_path / "nowhere"
    capsys.readouterr()  # what making the models printed
    code = main(["atlas", "--checkpoint", str(base), "--compare-model", str(other), "--corpus", str(corpus),
                 "--out", str(tmp_path / "out"), "--seq-len", str(SEQ_LEN)])
    err = [line for line in re.split(r"[\r\n]+", capsys.readouterr().err) if line.strip()]
    err = [line for line in err if not line.startswith("Loading weights")]
    assert code == 1 and len(err) == 1 and f"--compare-model {other}:" in err[0], err  # transformers' bar aside
    assert {"shallow": "attention layers", "other-tokenizer": "other token ids", "missing": "no such"}[which] in err[0]
    assert not (tmp_path / "out").exists()


def test_a_ray_actor_gives_the_local_engines_tallies(pair, tmp_path):
    """The Ray engine's actor class, called as Ray Data calls it (here without Ray, which the slow
    tests/model/atlas/test_ray_engine.py starts): it loads both models from their paths and each batch's
    tally, ``divergence`` with it, is the local engine's bit for bit."""
    from attnscope.model.atlas.corpus import batches, open_corpus, token_stream, windows
    from attnscope.model.atlas.ray_engine import AtlasWorker, _unpack
    from attnscope.model.atlas.tally import batch_tally

    base, tuned, _ = pair
    corpus = write_docs(tmp_path / "docs.txt", DOCS)
    lm, other = load_model(base, "cpu"), load_model(tuned, "cpu")
    todo = list(batches(windows(token_stream(open_corpus([corpus]).documents(), lm.tokenizer), SEQ_LEN), BATCH))
    worker = AtlasWorker(str(base), "cpu", "fp32", 8, K, 0, compare=str(tuned))
    out = worker({"batch": np.array([b.index for b in todo]), "window0": np.array([b.window0 for b in todo]),
                  "rows": np.array([b.ids.shape[0] for b in todo]), "cols": np.array([b.ids.shape[1] for b in todo]),
                  "ids": [b.ids.astype(np.int32).tobytes() for b in todo]})
    assert list(out["batch"]) == [b.index for b in todo]
    for b, blob in zip(todo, out["tally"]):
        there, here = _unpack(blob), batch_tally(lm.backend, b, 8, K, other.backend)
        assert there.metrics == here.metrics and here.metrics[-1] == "divergence"
        for name in here.arrays:
            assert np.array_equal(getattr(there, name), getattr(here, name)), name
