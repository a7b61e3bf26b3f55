"""The atlas routes: GET /api/atlas and GET /api/atlas/heads/{layer}/{head} serve an atlas as
``attnscope atlas`` wrote it (the reader's numbers, arranged), two atlases' difference, and each
exemplar with the token the explorer opens it at; bad parameters are a 422 naming the field."""

from __future__ import annotations

import math
import socket

import numpy as np
import pytest
from fastapi.testclient import TestClient

pytest.importorskip("pyarrow")

from attnscope.app.cli.main import main  # noqa: E402
from attnscope.app.compute.atlas import AtlasFolderError, load_atlases  # noqa: E402
from attnscope.app.main import create_app  # noqa: E402
from attnscope.model.atlas.build import atlas  # noqa: E402
from attnscope.model.atlas.read import read_atlas  # noqa: E402

from tests.kit.atlas import TEXTS, two_atlases  # noqa: E402


@pytest.fixture(scope="module")
def atlases(tmp_path_factory, checkpoint_dir):
    return two_atlases(tmp_path_factory.mktemp("atlas"), checkpoint_dir)


@pytest.fixture(scope="module")
def served(atlases, settings):
    with TestClient(create_app(settings.model_copy(update={"atlas": list(atlases)}))) as c:
        yield c


def grid(a: np.ndarray) -> list:
    return [[None if math.isnan(v) else pytest.approx(v, abs=1e-6) for v in row] for row in a]


def test_the_maps_are_the_atlas_means_and_the_difference_is_theirs(served, atlases):
    body = served.get("/api/atlas").json()
    first, second = (read_atlas(p) for p in atlases)
    assert [a["id"] for a in body["atlases"]] == ["first", "second"] and body["atlas"] == "first"
    assert body["layers"] == first.layers
    assert set(body["maps"]) == set(first.metrics)
    for metric, values in body["maps"].items():
        assert values == grid(first.maps[metric])
    about = body["atlases"][0]
    assert about["tokens"] == first.meta["tokens_seen"] and about["complete"]
    assert about["corpus"]["sha256"] == first.meta["corpus"]["sha256"]
    diff = served.get("/api/atlas", params={"atlas": "second", "compare": "first"}).json()
    assert diff["atlas"] == "second" and diff["compare"] == "first"
    for metric, values in diff["difference"].items():
        assert values == grid(second.maps[metric] - first.maps[metric])


def test_a_heads_card_holds_its_histograms_and_exemplars_at_their_query_token(served, atlases):
    first = read_atlas(atlases[0])
    layer, head = first.layers[-1], 1
    card = served.get(f"/api/atlas/heads/{layer}/{head}").json()
    expected = first.head(layer, head)
    for metric, m in card["metrics"].items():
        assert m["histogram"] == expected[metric]["histogram"] and sum(m["histogram"]) == m["count"]
        assert m["mean"] == pytest.approx(expected[metric]["mean"], abs=1e-12)
    tokenizer = served.app.state.attnscope.service.loaded.tokenizer
    assert card["exemplars"]
    for ex in card["exemplars"]:
        assert ex["value"] in [e["value"] for e in expected[ex["metric"]]["exemplars"]]
        offsets = tokenizer.encode(ex["text"]).offsets
        a, b = offsets[ex["query"]]  # the explorer opens at the token holding the query's first character
        assert a <= ex["query_start"] < b


@pytest.mark.parametrize(
    "url,loc",
    [
        ("/api/atlas?atlas=nope", ["query", "atlas"]),
        ("/api/atlas?compare=nope", ["query", "compare"]),
        ("/api/atlas/heads/99/0", ["path", "layer"]),
        ("/api/atlas/heads/0/99", ["path", "head"]),
        ("/api/atlas/heads/0/0?atlas=nope", ["query", "atlas"]),
    ],
)
def test_bad_parameters_are_a_422_naming_the_field(served, url, loc):
    r = served.get(url)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc
    assert served.get("/healthz").status_code == 200


def test_atlases_of_different_shapes_have_no_difference(served):
    state = served.app.state.attnscope
    second = state.atlases["second"]
    state.atlases["narrow"] = type(second)(path=second.path, meta=second.meta, layers=second.layers[:1], n_head=2)
    try:
        r = served.get("/api/atlas", params={"compare": "narrow"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "compare"]
        assert "same shape" in r.json()["detail"][0]["msg"]
    finally:
        del state.atlases["narrow"]


def test_without_an_atlas_the_list_is_empty_and_a_head_says_how_to_get_one(client):
    assert client.get("/api/atlas").json() == {
        "atlases": [],
        "atlas": None,
        "layers": [],
        "maps": {},
        "compare": None,
        "difference": None,
    }
    r = client.get("/api/atlas/heads/0/0")
    assert r.status_code == 404 and "--atlas" in r.json()["detail"][0]["msg"]


def test_a_folder_that_is_no_atlas_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(AtlasFolderError, match="not an atlas folder"):
        load_atlases([tmp_path])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["serve", "--port", str(port), "--atlas", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "not an atlas folder" in err and err.count("\n") == 1


def test_queries_and_keys_are_projected_together_onto_their_principal_axes(served, atlases):
    """Every position of the head's exemplar contexts, once as a query and once as a key; the
    keys moved onto the queries' mean, so the two clouds share a centre; the axes uncorrelated,
    the first holding the most variance."""
    layer, head = read_atlas(atlases[0]).layers[-1], 1
    body = served.get(f"/api/atlas/heads/{layer}/{head}/qk").json()
    tokenizer = served.app.state.attnscope.service.loaded.tokenizer
    n = sum(len(tokenizer.encode(t).ids) for t in body["texts"])
    q = np.array([[p["x"], p["y"]] for p in body["points"] if p["kind"] == "q"])
    k = np.array([[p["x"], p["y"]] for p in body["points"] if p["kind"] == "k"])
    assert len(q) == len(k) == n
    np.testing.assert_allclose(q.mean(0), k.mean(0), atol=1e-4)
    both = np.concatenate([q, k])
    centred = both - both.mean(0)
    assert abs((centred[:, 0] * centred[:, 1]).mean()) < 1e-3 * centred.var(0).sum()
    assert centred[:, 0].var() >= centred[:, 1].var() and 0 < sum(body["explained"]) <= 1 + 1e-9


def test_queries_and_keys_need_the_atlas_model_to_be_served(served):
    state = served.app.state.attnscope
    first = state.atlases["first"]
    meta = {**first.meta, "model": {**first.meta["model"], "name": "someone/else"}}
    state.atlases["other"] = type(first)(path=first.path, meta=meta, layers=first.layers, n_head=first.n_head,
                                         maps=first.maps, exemplars=first.exemplars, histograms=first.histograms,
                                         std=first.std, counts=first.counts, bin_edges=first.bin_edges)
    try:
        r = served.get(f"/api/atlas/heads/{first.layers[0]}/0/qk", params={"atlas": "other"})
        assert r.status_code == 422 and "someone/else" in r.json()["detail"][0]["msg"]
    finally:
        del state.atlases["other"]


def test_an_atlas_without_exemplars_has_no_queries_and_keys_to_project(tmp_path, settings, checkpoint_dir):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(TEXTS), encoding="utf-8")
    bare = atlas([corpus], tmp_path / "bare", checkpoint=checkpoint_dir, seq_len=16, exemplars=0, progress=False)
    with TestClient(create_app(settings.model_copy(update={"atlas": [bare]}))) as c:
        r = c.get("/api/atlas/heads/0/0/qk")
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "atlas"]
        assert "--exemplars 0" in r.json()["detail"][0]["msg"]


def test_every_exemplar_opens_at_its_query_token_over_multibyte_text(tmp_path, settings, checkpoint_dir):
    """Over accents, curly quotes, CJK, emoji and whitespace-only stretches: every exemplar of every
    head has a text that is not blank, and the served model's tokens of it have the query's token
    (its id, as the atlas kept it) at ``query``."""
    from tests.kit.atlas import multibyte_corpus

    out = atlas([multibyte_corpus(tmp_path / "c.jsonl")], tmp_path / "mb", checkpoint=checkpoint_dir, seq_len=24,
                exemplars=4, progress=False)
    kept = read_atlas(out)
    with TestClient(create_app(settings.model_copy(update={"atlas": [out]}))) as c:
        tokenizer = c.app.state.attnscope.service.loaded.tokenizer
        seen = 0
        for layer in kept.layers:
            for head in range(kept.n_head):
                card = c.get(f"/api/atlas/heads/{layer}/{head}").json()
                ids = {(r["window"], r["position"]): r["token_id"] for rows in kept.exemplars[(layer, head)].values()
                       for r in rows}
                for ex in card["exemplars"]:
                    seen += 1
                    enc = tokenizer.encode(ex["text"])
                    assert ex["text"].strip() and ex["query"] is not None, ex
                    assert enc.ids[ex["query"]] == ids[(ex["window"], ex["position"])], ex
                    assert enc.tokens[ex["query"]] == ex["token"], ex
    assert seen > 0
