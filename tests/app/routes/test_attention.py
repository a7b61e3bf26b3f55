"""Every endpoint through FastAPI's TestClient: shapes and numbers follow the contract."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
import torch
from attnscope.app.schemas.attention import FIELDS
from attnscope.app.service import build_service
from attnscope.model.fields import LAYER_DEPENDENT
from attnscope.model.inspection import inspect, masked_var, predictions, row_entropy
from attnscope.model.registry import load_model
from attnscope.model.stats import head_stats_arrays

from tests.kit.app import BLOCK_SIZE, HEAD_DIM, N_HEAD, N_LAYER, attention

TEXT = "The small cat sees the red door. The small cat"


# ------------------------------------------------------------------ health and model


def test_healthz(client):
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_readyz_after_load(client):
    r = client.get("/readyz")
    assert r.status_code == 200
    assert r.json() == {"status": "ready"}


def test_not_ready_before_load(unstarted_client):
    """Before the lifespan has loaded the model: live, not ready, model endpoints 503 JSON."""
    assert unstarted_client.get("/healthz").status_code == 200
    r = unstarted_client.get("/readyz")
    assert r.status_code == 503
    assert "not loaded" in r.json()["detail"]
    for method, url, body in [
        ("GET", "/api/model", None),
        ("GET", "/api/heads", None),
        ("POST", "/api/attention", {"text": "hi"}),
        ("POST", "/api/lessons/variance", {}),
    ]:
        r = unstarted_client.request(method, url, json=body)
        assert r.status_code == 503, url
        assert r.headers["content-type"] == "application/json"
        assert "not loaded" in r.json()["detail"]


def test_model_info(client, checkpoint_dir):
    info = client.get("/api/model").json()
    assert info["n_layer"] == N_LAYER
    assert info["n_head"] == N_HEAD
    assert info["d_model"] == N_HEAD * HEAD_DIM
    assert info["head_dim"] == HEAD_DIM
    assert info["block_size"] == BLOCK_SIZE
    assert info["device"] == "cpu"
    lm = load_model(checkpoint_dir, "cpu")
    assert info["vocab_size"] == lm.config.vocab_size
    assert info["parameters"] == lm.model.num_parameters()
    assert info["training"] == lm.training
    assert info["checkpoint"].endswith("tiny")


# ------------------------------------------------------------------ attention: shapes


def test_attention_default_shapes(client):
    data = attention(client, text=TEXT)
    T = len(data["tokens"])
    assert T == len(data["token_ids"]) == len(data["offsets"]) == len(data["predictions"]) > 5
    assert [lv["layer"] for lv in data["layers"]] == list(range(N_LAYER))
    for lv in data["layers"]:
        assert [hv["head"] for hv in lv["heads"]] == list(range(N_HEAD))
        for hv in lv["heads"]:
            assert set(hv) == {"head", "pattern", "stats"}  # the default include
            assert np.asarray(hv["pattern"]).shape == (T, T)
            assert len(hv["stats"]["row_entropy"]) == T
    assert np.asarray(data["mask"]).shape == (T, T)
    assert data["model"] == client.get("/api/model").json()
    assert data["timing_ms"] > 0
    assert list(data)[-1] == "timing_ms"


def test_tokens_offsets_and_ids_agree(client):
    text = "  Hello, wörld!\nThe cat."
    data = attention(client, text=text, include=[])
    assert data["tokens"][0].startswith("␣")  # a leading space is shown visibly
    ends = [end for _, end in data["offsets"]]
    assert ends[-1] == len(text)
    for start, end in data["offsets"]:
        assert 0 <= start <= end <= len(text)
    lm_vocab = client.get("/api/model").json()["vocab_size"]
    assert all(0 <= i < lm_vocab for i in data["token_ids"])


@pytest.mark.parametrize("select", [{}, {"layers": [N_LAYER - 1], "heads": [N_HEAD - 1]}], ids=["all", "one head"])
def test_no_predictions_asked_none_computed(client, select):
    body = attention(client, text=TEXT, top_k=0, include=list(FIELDS), **select)
    assert body["predictions"] == [[] for _ in body["tokens"]]
    # and the attention is the same as with predictions
    with_preds = attention(client, text=TEXT, top_k=3, include=list(FIELDS), **select)
    assert body["layers"] == with_preds["layers"]
    assert all(len(row) == 3 for row in with_preds["predictions"])


def test_every_field_for_one_head(client):
    data = attention(client, text=TEXT, layers=[1], heads=[0], include=list(FIELDS))
    T = len(data["tokens"])
    assert len(data["layers"]) == 1 and data["layers"][0]["layer"] == 1
    (hv,) = data["layers"][0]["heads"]
    assert hv["head"] == 0
    # fixed order, whatever the include order; a model without a softcap has no scores before it,
    # one without sinks no sink_mass
    only_some = LAYER_DEPENDENT  # a softcap, sinks, MLA, output gates
    assert list(hv) == ["head", *(f for f in FIELDS if f not in only_some)]
    for name in ("pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled"):
        assert len(hv[name]) == T and all(len(row) == T for row in hv[name])
    for name in ("q", "k", "v"):
        assert np.asarray(hv[name]).shape == (T, HEAD_DIM)


def test_include_layers_heads_select_exactly(client):
    data = attention(client, text=TEXT, layers=[1, 0, 1], heads=[1], include=["q", "attn_scores"])
    assert [lv["layer"] for lv in data["layers"]] == [0, 1]  # ascending, duplicates ignored
    for lv in data["layers"]:
        assert [set(hv) for hv in lv["heads"]] == [{"head", "q", "attn_scores"}]
        assert lv["heads"][0]["head"] == 1
    empty = attention(client, text=TEXT, include=[], layers=[])
    assert empty["layers"] == []
    assert len(empty["predictions"]) == len(empty["tokens"])
    # empty selections with fields to compute: nothing to compute, still a valid answer
    assert attention(client, text=TEXT, layers=[])["layers"] == []
    no_heads = attention(client, text=TEXT, heads=[], include=list(FIELDS))
    assert [(lv["layer"], lv["heads"]) for lv in no_heads["layers"]] == [(i, []) for i in range(N_LAYER)]


def test_selected_heads_equal_the_full_view(client):
    """Asking for a subset returns the same numbers as the all-heads answer."""
    full = attention(client, text=TEXT, include=list(FIELDS))
    part = attention(client, text=TEXT, include=list(FIELDS), layers=[1], heads=[1])
    assert part["layers"][0]["heads"][0] == full["layers"][1]["heads"][1]


# ------------------------------------------------------------------ attention: numbers


def test_pattern_rows_sum_to_one_and_causal_zeros(client):
    data = attention(client, text=TEXT, include=["pattern", "pattern_unscaled"])
    mask = np.asarray(data["mask"])
    T = mask.shape[0]
    assert (mask == np.tril(np.ones((T, T), dtype=int))).all()
    for lv in data["layers"]:
        for hv in lv["heads"]:
            for name in ("pattern", "pattern_unscaled"):
                p = np.asarray(hv[name], dtype=np.float64)
                assert np.abs(p.sum(-1) - 1).max() <= 1e-3
                assert (p[np.triu_indices(T, 1)] == 0).all()  # exactly 0 above the diagonal
                assert (p >= 0).all() and (p <= 1).all()


def test_not_causal_fills_the_upper_triangle(client):
    data = attention(client, text=TEXT, causal=False, include=["pattern", "attn_scores", "attn_scores_raw"])
    assert data["causal"] is False
    mask = np.asarray(data["mask"])
    assert (mask == 1).all()
    T = mask.shape[0]
    for lv in data["layers"]:
        for hv in lv["heads"]:
            p = np.asarray(hv["pattern"], dtype=np.float64)
            assert np.abs(p.sum(-1) - 1).max() <= 1e-3
            assert (p[np.triu_indices(T, 1)] > 0).any()
            assert all(x is not None for row in hv["attn_scores"] for x in row)


def test_masked_scores_are_null_never_inf_or_nan(client):
    r = client.post("/api/attention", json={"text": TEXT, "include": ["attn_scores", "attn_scores_raw"]})
    assert b"Infinity" not in r.content and b"NaN" not in r.content
    data = r.json()
    mask = np.asarray(data["mask"])
    for lv in data["layers"]:
        for hv in lv["heads"]:
            for name in ("attn_scores", "attn_scores_raw"):
                rows = hv[name]
                for i, row in enumerate(rows):
                    for j, x in enumerate(row):
                        assert (x is None) == (mask[i][j] == 0)


def test_scaled_scores_are_raw_over_the_divisor(client):
    for scale, divisor in (("sqrt_dk", math.sqrt(HEAD_DIM)), ("none", 1.0), (2.5, 2.5)):
        data = attention(client, text=TEXT, include=["attn_scores", "attn_scores_raw"], scale=scale)
        assert data["divisor"] == pytest.approx(divisor)
        hv = data["layers"][0]["heads"][0]
        raw = np.array([[np.nan if x is None else x for x in row] for row in hv["attn_scores_raw"]])
        scaled = np.array([[np.nan if x is None else x for x in row] for row in hv["attn_scores"]])
        ok = ~np.isnan(raw)
        assert np.allclose(scaled[ok], raw[ok] / divisor, atol=2e-4)


def test_variance_ratio_is_dk(client):
    data = attention(client, text=TEXT, include=["stats"])
    for lv in data["layers"]:
        for hv in lv["heads"]:
            s = hv["stats"]
            assert s["variance_ratio"] == pytest.approx(HEAD_DIM, rel=1e-4)
            assert s["var_scores_raw"] == pytest.approx(s["var_scores"] * HEAD_DIM, rel=1e-4)
    other = attention(client, text=TEXT, include=["stats"], scale=3.0)
    assert other["layers"][0]["heads"][0]["stats"]["variance_ratio"] == pytest.approx(9.0, rel=1e-4)


def test_unscaled_entropy_below_scaled_on_average(client):
    data = attention(client, text=TEXT, include=["stats"])
    stats = [hv["stats"] for lv in data["layers"] for hv in lv["heads"]]
    assert np.mean([s["entropy_unscaled"] for s in stats]) < np.mean([s["entropy"] for s in stats])
    assert np.mean([s["max_weight_unscaled"] for s in stats]) > np.mean([s["max_weight"] for s in stats])
    for s in stats:
        assert s["row_entropy"][0] == 0  # the first query sees one key
        assert s["entropy"] == pytest.approx(np.mean(s["row_entropy"]), abs=1e-4)


def test_stats_match_their_definitions(checkpoint_dir):
    """The one statistics implementation equals the definitions written out plainly, for any subset of heads:
    population variances over unmasked entries, entropies of explicit softmax rows, mean row maxima."""
    lm = load_model(checkpoint_dir, "cpu")
    for causal, scale in ((True, "sqrt_dk"), (False, "none"), (True, 0.7), (True, 0.001), (False, 10000.0)):
        trace = inspect(lm.model, lm.tokenizer, TEXT, causal=causal, scale=scale)
        for layer in range(N_LAYER):
            heads = torch.tensor([1, 0])
            q, k = trace.q[layer, heads], trace.k[layer, heads]
            raw, scores = trace.attn_scores_raw[layer, heads], trace.attn_scores[layer, heads]
            pattern = trace.pattern[layer, heads]
            got = head_stats_arrays(q, k, raw, scores, pattern, trace.mask, trace.divisor)
            unscaled = torch.softmax(raw.double().masked_fill(~trace.mask, float("-inf")), -1)
            var_raw = masked_var(raw.double(), trace.mask)
            var_scaled = masked_var(raw.double() / trace.divisor, trace.mask)
            expected = {
                "var_q": q.double().var(dim=(-2, -1), unbiased=False),
                "var_k": k.double().var(dim=(-2, -1), unbiased=False),
                "var_scores_raw": var_raw,
                "var_scores": var_scaled,
                "row_entropy": row_entropy(pattern.double()),
                "row_entropy_unscaled": row_entropy(unscaled),
                "max_weight": pattern.double().amax(-1).mean(-1),
                "max_weight_unscaled": unscaled.amax(-1).mean(-1),
            }
            expected["entropy"] = expected["row_entropy"].mean(-1)
            expected["entropy_unscaled"] = expected["row_entropy_unscaled"].mean(-1)
            for name, value in expected.items():
                assert torch.allclose(got[name].double(), value, rtol=2e-4, atol=2e-5), (name, causal, scale)
            if (var_scaled > 0).all():
                assert torch.allclose(got["variance_ratio"].double(), var_raw / var_scaled, rtol=1e-4)


def test_pattern_matches_inspect(client, checkpoint_dir):
    lm = load_model(checkpoint_dir, "cpu")
    trace = inspect(lm.model, lm.tokenizer, TEXT)
    data = attention(client, text=TEXT, include=["pattern", "q"])
    assert data["token_ids"] == trace.token_ids
    got = np.asarray(data["layers"][1]["heads"][0]["pattern"])
    assert np.abs(got - trace.pattern[1, 0].numpy()).max() <= 5e-6 + 1e-7
    q = np.asarray(data["layers"][1]["heads"][0]["q"])
    assert np.abs(q - trace.q[1, 0].numpy()).max() <= 5e-5 + 1e-6


def test_predictions_are_a_distribution(client, checkpoint_dir):
    for top_k in (0, 1, 7, 50):
        data = attention(client, text=TEXT, include=[], top_k=top_k, temperature=0.8)
        for row in data["predictions"]:
            assert len(row) == top_k
            probs = [p["prob"] for p in row]
            assert probs == sorted(probs, reverse=True)
            assert all(0 <= p <= 1 for p in probs)
            assert sum(probs) <= 1 + 1e-9
            assert len({p["id"] for p in row}) == top_k
    # the same guesses as model.inspection.predictions
    lm = load_model(checkpoint_dir, "cpu")
    svc = build_service(lm, with_heads=False)
    ref = predictions(inspect(lm.model, lm.tokenizer, TEXT), lm.tokenizer, top_k=5, temperature=0.8)
    data = attention(client, text=TEXT, include=[], top_k=5, temperature=0.8)
    for got_row, ref_row in zip(data["predictions"], ref):
        assert [p["id"] for p in got_row] == [p.id for p in ref_row]
        assert [p["token"] for p in got_row] == [svc.displays[p.id] for p in ref_row]
        for g, r in zip(got_row, ref_row):
            assert g["prob"] == pytest.approx(r.prob, rel=1e-4, abs=1e-6)


def test_temperature_sharpens(client):
    hot = attention(client, text=TEXT, include=[], top_k=1, temperature=5.0)["predictions"][-1][0]["prob"]
    cold = attention(client, text=TEXT, include=[], top_k=1, temperature=0.2)["predictions"][-1][0]["prob"]
    assert cold > hot


@pytest.mark.parametrize(
    "text",
    [
        "tab\there, bell\x07, escape\x1b[0m, nul\x00 end",
        "emoji 👩‍👩‍👧 and 🐍 and flags 🇳🇱",
        "שלום עולם — مرحبا بالعالم",
        "e\u0301 a\u0308 combining n\u0303",
        "\u200b\u200d\ufeff zero widths",
        "line one\r\nline two\n",
        "x",
    ],
)
def test_unusual_text_is_valid(client, text):
    data = attention(client, text=text, include=["pattern"])
    T = len(data["tokens"])
    assert T >= 1
    assert data["offsets"][-1][1] == len(text)
    assert all(isinstance(t, str) and t for t in data["tokens"])
    p = np.asarray(data["layers"][0]["heads"][0]["pattern"])
    assert p.shape == (T, T)


def test_full_context_is_accepted(client, checkpoint_dir):
    lm = load_model(checkpoint_dir, "cpu")
    ids = lm.tokenizer.encode_ids(" ".join(["the cat"] * 200))[:BLOCK_SIZE]
    text = lm.tokenizer.decode(ids)
    assert len(lm.tokenizer.encode_ids(text)) == BLOCK_SIZE
    data = attention(client, text=text, include=["pattern"])
    assert len(data["tokens"]) == BLOCK_SIZE


# ------------------------------------------------------------------ wire format


def test_identical_requests_give_identical_bytes(client):
    body = {"text": TEXT, "include": list(FIELDS), "top_k": 10}
    first = client.post("/api/attention", json=body)
    second = client.post("/api/attention", json=body)
    assert first.status_code == second.status_code == 200
    # timing_ms is the last field: everything before it is the same, byte for byte
    head1, tail1 = first.content.rsplit(b',"timing_ms":', 1)
    head2, tail2 = second.content.rsplit(b',"timing_ms":', 1)
    assert head1 == head2
    assert float(tail1.rstrip(b"}")) > 0 and float(tail2.rstrip(b"}")) > 0


def test_server_timing_header(client):
    r = client.post("/api/attention", json={"text": TEXT})
    timing = r.headers["server-timing"]
    names = [part.split(";")[0].strip() for part in timing.split(",")]
    assert names == ["queue", "compute", "encode", "total"]
    total = float(r.headers["x-timing-ms"])
    assert total == pytest.approx(r.json()["timing_ms"], abs=0.01)


def test_numbers_are_rounded(client):
    r = client.post("/api/attention", json={"text": TEXT, "include": ["pattern", "q"]})
    hv = json.loads(r.content)["layers"][0]["heads"][0]
    for row in hv["pattern"]:
        for x in row:
            assert round(x, 5) == x
    for row in hv["q"]:
        for x in row:
            assert round(x, 4) == x


def test_stats_have_six_significant_digits(client):
    hv = attention(client, text=TEXT, include=["stats"])["layers"][0]["heads"][0]
    for name in ("var_q", "var_k", "var_scores_raw", "var_scores", "entropy", "max_weight"):
        x = hv["stats"][name]
        mantissa = f"{x:.15e}".split("e")[0].replace(".", "").rstrip("0")
        assert len(mantissa.lstrip("-")) <= 6, (name, x)


def test_large_bodies_are_gzipped(client):
    r = client.post("/api/attention", json={"text": TEXT, "include": list(FIELDS)}, headers={"Accept-Encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip"
    small = client.get("/healthz", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in small.headers
    raw = client.post(
        "/api/attention", json={"text": TEXT, "include": list(FIELDS)}, headers={"Accept-Encoding": "identity"}
    )
    assert "content-encoding" not in raw.headers
    assert gzip.compress(raw.content)  # plain bytes came back
    assert r.json()["layers"] == raw.json()["layers"]


# ------------------------------------------------------------------ heads and lessons


def test_heads_roles(client):
    data = client.get("/api/heads").json()
    assert data["roles"] == ["previous_token", "first_token", "induction", "self"]
    scores = np.asarray(data["scores"])
    assert scores.shape == (N_LAYER, N_HEAD, 4)
    assert ((scores >= 0) & (scores <= 1)).all()


def test_heads_are_computed_once(client, app, monkeypatch):
    """After startup /api/heads answers from the cache: computing again would fail here."""
    from attnscope.app import service

    before = client.get("/api/heads").content

    def fail(*args, **kwargs):
        raise AssertionError("head roles recomputed")

    monkeypatch.setattr(service, "role_scores", fail)
    assert client.get("/api/heads").content == before


def test_lesson_softmax_scaling_reproduces_the_notebook(client):
    r = client.post("/api/lessons/softmax-scaling", json={"logits": [0.1, -0.2, 0.3, -0.2, 0.5], "factor": 8})
    assert r.status_code == 200
    data = r.json()
    assert data["softmax_scaled"] == pytest.approx([0.0326, 0.0030, 0.1615, 0.0030, 0.8000], abs=1e-4)
    assert data["softmax"] == pytest.approx([0.1925, 0.1426, 0.2351, 0.1426, 0.2872], abs=1e-4)
    assert data["entropy_scaled"] < data["entropy"]
    assert data["var_scaled"] == pytest.approx(64 * data["var"], rel=1e-5)
    assert client.post("/api/lessons/softmax-scaling", json={}).json() == data  # the defaults are the notebook's


def test_lesson_bag_of_words_agrees(client):
    data = client.post("/api/lessons/bag-of-words", json={"T": 8, "C": 2, "seed": 1337}).json()
    assert data["agree"] is True
    assert data["max_abs_diff"] < 1e-5
    x = np.asarray(data["x"])
    assert x.shape == (8, 2)
    expected = np.cumsum(x, axis=0) / np.arange(1, 9)[:, None]
    for name in ("loop", "matmul", "softmax"):
        assert np.allclose(np.asarray(data[name]), expected, atol=1e-5)
    w = np.asarray(data["weights"])
    assert np.allclose(w, np.tril(np.ones((8, 8))) / np.arange(1, 9)[:, None], atol=1e-6)


def test_lesson_variance_ratio_is_head_size(client):
    for head_size in (16, 64):
        data = client.post(
            "/api/lessons/variance", json={"head_size": head_size, "T": 32, "seed": 1, "samples": 64}
        ).json()
        assert data["ratio"] == pytest.approx(head_size, rel=1e-4)
        assert data["var_scores_raw"] == pytest.approx(head_size, rel=0.15)
        assert data["var_scores"] == pytest.approx(1.0, rel=0.15)
        assert data["var_q"] == pytest.approx(1.0, rel=0.1)
        assert len(data["bin_edges"]) == len(data["hist_raw"]) + 1 == len(data["hist_scaled"]) + 1
        assert sum(data["hist_raw"]) == sum(data["hist_scaled"]) == 64 * 32 * 32


def test_lessons_are_deterministic(client):
    body = {"head_size": 8, "T": 4, "seed": 99, "samples": 3}
    assert (
        client.post("/api/lessons/variance", json=body).content
        == client.post("/api/lessons/variance", json=body).content
    )


# ------------------------------------------------------------------ static files and docs


def test_frontend_and_plotly_are_served(client):
    index = client.get("/")
    assert index.status_code == 200
    assert "text/html" in index.headers["content-type"]
    js = client.get("/vendor/plotly.min.js")
    assert js.status_code == 200
    assert "javascript" in js.headers["content-type"]
    assert "max-age=31536000" in js.headers["cache-control"]
    assert b"plotly" in js.content[:2000].lower()


def test_python_files_are_not_served(client):
    assert client.get("/__init__.py").status_code == 404
    assert client.get("/__pycache__/").status_code == 404


def test_wrong_method_on_an_api_path_is_405_with_allow(client):
    r = client.get("/api/attention")
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    assert r.json() == {"detail": "Method Not Allowed"}
    r = client.delete("/api/model")
    assert r.status_code == 405
    assert "GET" in r.headers["allow"]


def test_unknown_api_path_is_json_404(client):
    r = client.get("/api/nothing-here")
    assert r.status_code == 404
    assert r.json() == {"detail": "Not Found"}


def test_openapi_declares_examples_and_errors(client):
    spec = client.get("/openapi.json").json()
    post = spec["paths"]["/api/attention"]["post"]
    assert {"200", "413", "422", "503"} <= set(post["responses"])
    request_schema = spec["components"]["schemas"]["AttentionRequest"]
    assert request_schema["examples"]
    text = request_schema["properties"]["text"]
    assert [t["maxLength"] for t in text["anyOf"] if t.get("type") == "string"] == [16000]


def test_no_cors_by_default(client):
    r = client.get("/api/model", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers
    pre = client.options(
        "/api/attention", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert "access-control-allow-origin" not in pre.headers


def test_cors_when_configured(settings):
    from attnscope.app.main import create_app
    from fastapi.testclient import TestClient

    app = create_app(settings.model_copy(update={"cors_origins": ["http://allowed.example"]}))
    with TestClient(app) as c:
        ok = c.get("/healthz", headers={"Origin": "http://allowed.example"})
        assert ok.headers["access-control-allow-origin"] == "http://allowed.example"
        other = c.get("/healthz", headers={"Origin": "http://other.example"})
        assert "access-control-allow-origin" not in other.headers


def test_settings_from_environment(monkeypatch, tmp_path):
    from attnscope.app.settings import Settings

    monkeypatch.setenv("ATTNSCOPE_CHECKPOINT", str(tmp_path))
    monkeypatch.setenv("ATTNSCOPE_CORS_ORIGINS", "http://a.example, http://b.example")
    monkeypatch.setenv("ATTNSCOPE_MAX_TEXT_CHARS", "100")
    s = Settings()
    assert s.checkpoint_path == tmp_path
    assert s.cors_origins == ["http://a.example", "http://b.example"]
    assert s.max_text_chars == 100 == s.text_limit()
    assert s.host == "127.0.0.1"
    assert s.port == 8000
    assert s.max_body_bytes is None and s.body_limit() == 65536
    monkeypatch.delenv("ATTNSCOPE_CHECKPOINT")
    monkeypatch.delenv("ATTNSCOPE_CORS_ORIGINS")
    from attnscope.model.ours.checkpoint import SHIPPED

    assert Settings().checkpoint_path == SHIPPED
    assert Settings().cors_origins == []


def test_text_limit_follows_the_models_context(tmp_path):
    """Unset, the character guard is 8 characters per token of context (at least 16000) and the
    body limit 4 bytes per character (at least 64 KiB): a long-context model takes long texts."""
    import json

    from attnscope.app.settings import Settings

    assert Settings().text_limit() == 16000  # the shipped model: 256 tokens
    assert Settings().body_limit() == 65536
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 8192}))
    s = Settings(checkpoint=tmp_path)
    assert s.text_limit() == 8 * 8192 and s.body_limit() == 4 * 8 * 8192


def test_text_limit_follows_settings(settings):
    from attnscope.app.main import create_app
    from fastapi.testclient import TestClient

    with TestClient(create_app(settings.model_copy(update={"max_text_chars": 10}))) as c:
        assert c.post("/api/attention", json={"text": "x" * 10, "include": []}).status_code == 200
        r = c.post("/api/attention", json={"text": "x" * 11})
        assert r.status_code == 422
        assert r.json()["detail"][0]["ctx"] == {"max_length": 10}
        text = c.get("/openapi.json").json()["components"]["schemas"]["AttentionRequest"]["properties"]["text"]
        assert [t["maxLength"] for t in text["anyOf"] if t.get("type") == "string"] == [10]


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc", reason="glibc only")
def test_heap_retention_is_limited_on_glibc(monkeypatch):
    from attnscope.app.lifespan import limit_heap_retention

    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert limit_heap_retention() is True
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")  # the operator's own setting wins
    assert limit_heap_retention() is False


def test_a_capture_block_stays_on_the_heap():
    """A block's temporaries are allocated and freed many times per layer: below the mmap
    threshold they reuse heap memory instead of faulting in fresh pages every time."""
    from attnscope.app.lifespan import HEAP_MMAP_THRESHOLD
    from attnscope.model.blocks import BLOCK_BUDGET_BYTES, BLOCK_TEMPORARIES
    from attnscope.model.capture import Capture, CapturePlan

    biggest = BLOCK_BUDGET_BYTES // BLOCK_TEMPORARIES
    assert biggest < HEAP_MMAP_THRESHOLD
    cap = Capture(CapturePlan(layers=[0], heads=[0]))
    for T, nh in [(256, 4), (4096, 9), (8192, 32)]:
        rows = cap.blocks(T, T, nh)[0]
        assert nh * (rows[1] - rows[0]) * T * 4 <= biggest


def test_the_one_head_routes_take_the_servers_own_text_limit(checkpoint_dir):
    """A server whose text limit is over the schema's default (a long-context model): a long text
    in text or text_b is judged by the model (a 422 naming the field), never a 500."""
    from attnscope.app.main import create_app
    from attnscope.app.settings import Settings
    from fastapi.testclient import TestClient

    long_text = "The cat sat on the mat. " * 900  # 21,600 characters, over the default 16,000
    with TestClient(create_app(Settings(checkpoint=checkpoint_dir, device="cpu", max_text_chars=50_000))) as c:
        for route, body in [
            ("/api/neuron", {"text": long_text, "layer": 0, "head": 0}),
            ("/api/selection", {"text": long_text, "layer": 0, "head": 0}),
            ("/api/compare-texts", {"text": long_text, "text_b": "The cat", "layer": 0, "head": 0}),
            ("/api/compare-texts", {"text": "The cat", "text_b": long_text, "layer": 0, "head": 0}),
        ]:
            r = c.post(route, json=body)
            assert r.status_code == 422, (route, r.status_code, r.text[:200])
            item = r.json()["detail"][0]
            field = "text_b" if body.get("text_b") == long_text else "text"
            assert item["loc"] == ["body", field] and item["msg"].startswith(f"{field} is ") and "tokens" in item["msg"]
