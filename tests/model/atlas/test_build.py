"""The head atlas: its numbers equal a direct computation from transformers' eager attention, a
head built to look back one token is found, the exemplars are the true top rows, and a run
interrupted and resumed ends with the same bits as one that never stopped."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from attnscope.model.atlas import stats as atlas_stats
from attnscope.model.atlas.build import STATE_FILE, AtlasError, atlas
from attnscope.model.atlas.corpus import batches, open_corpus, token_stream, windows
from attnscope.model.atlas.metrics import CONTEXT_BEFORE, METRICS, Tally, bin_index
from attnscope.model.atlas.read import EXEMPLARS_FILE, HEADS_FILE, META_FILE, read_atlas
from attnscope.model.atlas.tally import batch_tally
from attnscope.model.heads import induction_score, induction_tokens, probe_prefix, random_pool
from attnscope.model.ours.checkpoint import save_checkpoint
from attnscope.model.ours.gpt import GPT, GPTConfig

pytest.importorskip("transformers")

from attnscope.model.ours.gpt2_format import export_hf  # noqa: E402
from attnscope.model.registry import load_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from tests.kit.atlas import ENGLISH_DOCS, multibyte_corpus, reference_windows, write_docs  # noqa: E402
from tests.kit.family import build  # noqa: E402

DOCS = [
    *ENGLISH_DOCS,
    "The red cat opens the old door. The red cat opens the old door again.",
    "Numbers: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10. Letters: a b c d e f g h.",
    "When the rain stopped, the children went outside and played until dinner was ready.",
    "He wrote the letter twice, because the first copy had a mistake in the address.",
]
SEQ_LEN, BATCH, LOCAL, K = 24, 3, 4, 5
TOL = 1e-5


def eager(path, ids: torch.Tensor) -> np.ndarray:
    """(B, L, nh, T, T) float64 from transformers' eager attention (``output_attentions``)."""
    ref = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    with torch.no_grad():
        out = ref(ids, output_attentions=True)
    return torch.stack(out.attentions, dim=1).double().numpy()


def row_metrics(A: np.ndarray, w: int) -> dict[str, np.ndarray]:
    """Every per-row metric of one window's patterns ``A`` (L, nh, T, T), rows t >= 1 -> (L, nh, T - 1)."""
    T = A.shape[-1]
    t = np.arange(1, T)
    rows = A[:, :, 1:, :]
    back = t[:, None] - np.arange(T)[None, :]
    logs = np.log(np.where(rows > 0, rows, 1.0))
    return {
        "first_token": rows[..., 0],
        "sink_mass": 1.0 - rows.sum(-1),
        "previous_token": A[:, :, t, t - 1],
        "self": A[:, :, t, t],
        "entropy": -(rows * logs).sum(-1),
        "mean_distance": (rows * back).sum(-1),
        "local_fraction": (rows * ((back >= 0) & (back < w))).sum(-1),
    }


FIRST_ROW = {"first_token": 2, "previous_token": 2, "local_fraction": LOCAL}  # the others: row 1


def reference(path, tokenizer, docs):
    """Per metric (L, nh, R) row values over all windows and each row's (window, position), over the
    rows the metric is measured on: t >= 1, and t >= 2 for first_token and previous_token (at t = 1
    the previous token is the first), t >= LOCAL for local_fraction (a shorter row is all local)."""
    per_window = [
        row_metrics(eager(path, torch.tensor([w]))[0], LOCAL) for w in reference_windows(tokenizer, docs, SEQ_LEN)
    ]
    values, where = {}, {}
    for m in METRICS:
        first = FIRST_ROW.get(m, 1)
        values[m] = np.concatenate([pw[m][..., first - 1 :] for pw in per_window], axis=-1)
        where[m] = [(i, t) for i, pw in enumerate(per_window) for t in range(first, pw["self"].shape[-1] + 1)]
    return values, where


def reference_induction(path, lm) -> np.ndarray:
    tok, facts = lm.tokenizer, lm.facts
    n = min(40, (facts.block_size - 1) // 2)
    rand = induction_tokens(facts.vocab_size, n=n, pool=random_pool(tok, facts.vocab_size))
    start = probe_prefix(tok) or tok.encode_ids("")[:1]
    ids = torch.cat([torch.tensor(start, dtype=torch.long).expand(rand.size(0), len(start)), rand, rand], dim=1)
    return induction_score(torch.from_numpy(eager(path, ids)), len(start), n).mean(0).numpy()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (the loaded model, a transformers folder of it for the eager reference)."""
    root = tmp_path_factory.mktemp("atlas-models")
    shipped = load_model(None, "cpu")
    out = {"shipped": (shipped, export_hf(shipped.model, shipped.tokenizer, root / "shipped-hf"))}
    # grouped-query attention (6 heads, 2 kv heads); learned sinks; softcapped scores and sliding windows
    for family in ("llama", "gpt_oss", "gemma2"):
        path = build(family, root / family)
        out[family] = (load_model(path, "cpu"), path)
    return out


@pytest.mark.parametrize("rows", [None, 1, 5], ids=["whole-layer", "one-row-blocks", "five-row-blocks"])
@pytest.mark.parametrize("name", ["shipped", "llama", "gpt_oss", "gemma2"])
def test_metrics_equal_eager_attention(name, rows, models, tmp_path, monkeypatch):
    lm, path = models[name]
    if rows:
        monkeypatch.setattr(atlas_stats, "CPU_BLOCK_ROWS", rows)
    corpus = write_docs(tmp_path / "docs.txt", DOCS)
    atlas(corpus, tmp_path / "out", model=lm, seq_len=SEQ_LEN, batch_size=BATCH, local_window=LOCAL, exemplars=K)
    got = read_atlas(tmp_path / "out")
    values, _ = reference(path, lm.tokenizer, DOCS)
    assert got.layers == lm.facts.attention_layers
    sinks = name == "gpt_oss"
    assert ("sink_mass" in got.metrics) == sinks
    for m in METRICS:
        if m == "sink_mass" and not sinks:
            continue
        v = values[m]
        assert (got.counts[m] == v.shape[-1]).all(), m
        np.testing.assert_allclose(
            got.maps[m], v.mean(-1), rtol=0, atol=TOL * max(1.0, np.abs(v).max() / 10), err_msg=m
        )
        np.testing.assert_allclose(got.std[m], v.std(-1), rtol=0, atol=1e-4 * max(1.0, np.abs(v).max() / 10), err_msg=m)
        bins = bin_index(v.astype(np.float32), m)
        nb = len(got.bin_edges[m]) - 1
        want = np.stack([[np.bincount(b, minlength=nb) for b in layer] for layer in bins])
        assert np.array_equal(got.histograms[m], want), m
    np.testing.assert_allclose(got.maps["induction"], reference_induction(path, lm), atol=TOL)
    meta = json.loads((tmp_path / "out" / META_FILE).read_text())
    assert meta["complete"] and meta["tokens_seen"] == sum(map(len, reference_windows(lm.tokenizer, DOCS, SEQ_LEN)))
    assert pq.read_schema(tmp_path / "out" / HEADS_FILE).metadata[b"attnscope.atlas"] == json.dumps(meta).encode()


def test_exemplars_are_the_top_rows_of_eager_attention(models, tmp_path):
    lm, path = models["shipped"]
    atlas(write_docs(tmp_path / "docs.txt", DOCS), tmp_path / "out", model=lm, seq_len=SEQ_LEN, batch_size=BATCH,
          local_window=LOCAL, exemplars=K)
    got = read_atlas(tmp_path / "out")
    values, where = reference(path, lm.tokenizer, DOCS)
    wins = reference_windows(lm.tokenizer, DOCS, SEQ_LEN)
    isolated = 0
    for li, layer in enumerate(got.layers):
        for h in range(lm.facts.n_head):
            for m in METRICS[:1] + METRICS[2:]:
                v, rows_at = values[m][li, h], where[m]
                # as the maps, TOL per 10 of the terms summed: a distance is t * sum(p) - sum(p * j), t < SEQ_LEN
                tol = TOL * max(1.0, np.abs(v).max() / 10, (SEQ_LEN - 1) / 10 if m == "mean_distance" else 0.0)
                order = sorted(range(len(v)), key=lambda r: (-v[r], rows_at[r]))[:K]  # brute force: value, then earlier
                rows = got.exemplars[(layer, h)][m]
                assert [r["rank"] for r in rows] == list(range(K))
                for r, ex in zip(order, rows):
                    at = rows_at.index((ex["window"], ex["position"]))
                    assert abs(ex["value"] - v[r]) <= tol and abs(v[at] - ex["value"]) <= tol
                    if (np.abs(v - v[r]) <= tol).sum() == 1:  # no near-tie, which float rounding could order either way
                        assert (ex["window"], ex["position"]) == rows_at[r]
                        isolated += 1
                    win = wins[ex["window"]]
                    assert ex["token_id"] == win[ex["position"]]
                    assert ex["text"][ex["query_start"] : ex["query_end"]] == lm.tokenizer.decode([ex["token_id"]])
                    assert max(0, ex["position"] - CONTEXT_BEFORE) <= ex["context_start"] <= ex["position"]
                    assert ex["text"].startswith(lm.tokenizer.decode(win[ex["context_start"] : ex["position"]]))
    assert isolated >= 0.5 * len(got.layers) * lm.facts.n_head * (len(METRICS) - 1) * K


@pytest.mark.parametrize("name", ["shipped", "llama"])  # a byte-level BPE; SentencePiece with byte fallback and a BOS
def test_every_exemplar_reads_back_as_its_own_tokens(name, models, tmp_path):
    """Over accents, curly quotes, CJK, emoji and whitespace-only stretches, every exemplar's text
    shows something, has whole characters only, and the model's tokenizer reads it with the query
    as one token with its id and the span ``query_start:query_end``; a byte-level BPE reads it as
    the window's own tokens from ``context_start`` (a SentencePiece tokenizer puts a "▁" before a
    text that starts inside a word, which may merge with what follows, so not there). No
    exemplar is a row where its metric is at its maximum by construction."""
    lm, _ = models[name]
    tok = lm.tokenizer
    corpus = multibyte_corpus(tmp_path / "multibyte.jsonl")
    atlas(corpus, tmp_path / "out", model=lm, seq_len=SEQ_LEN, batch_size=BATCH, local_window=LOCAL, exemplars=K)
    got = read_atlas(tmp_path / "out")
    wins = reference_windows(tok, list(open_corpus([corpus]).documents()), SEQ_LEN)
    pieces = sum(1 for w in wins for i in w if _cut_character(tok.token_bytes(i)))
    assert pieces > 0.1 * sum(map(len, wins))  # the corpus does split characters
    head = [tok.bos_id] if tok.bos_id is not None else []
    shown = 0
    for per_metric in got.exemplars.values():
        for metric, rows in per_metric.items():
            for ex in rows:
                shown += 1
                text, win = ex["text"], wins[ex["window"]]
                assert text.strip() and "\ufffd" not in text, ex
                enc = tok.encode(text)
                span = (ex["query_start"], ex["query_end"])
                at = [i for i, (t, s) in enumerate(zip(enc.ids, enc.offsets))
                      if t == ex["token_id"] and tuple(s) == span]
                assert len(at) == 1, ex  # the query: one token of the text, with its id and its span
                if name == "shipped":  # byte-level: the text is the window's tokens, exactly
                    q = len(head) + ex["position"] - ex["context_start"]
                    assert at == [q] and enc.ids == head + win[ex["context_start"] : q - len(head) + ex["context_start"]
                                                               + len(enc.ids) - q], ex
                assert ex["position"] >= FIRST_ROW.get(metric, 1), ex
    assert shown >= 0.9 * len(got.layers) * lm.facts.n_head * (len(METRICS) - 1) * K


def _cut_character(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def previous_token_model(tmp_path):
    """Our GPT with one layer whose head 0 looks back one token: every token embeds to 0 and
    position p to the unit vector e_p, so after LayerNorm x_t peaks at dimension t; head 0's
    keys read x as it is and its queries shifted by one, so q_t · k_j is large only at j = t − 1."""
    from attnscope.model.ours.tokenizer import BPETokenizer

    tok = BPETokenizer.load(load_model(None, "cpu").path / "tokenizer.json")
    cfg = GPTConfig(block_size=32, vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_embd=64, name="prev")
    model = GPT(cfg)
    hs = cfg.head_dim
    with torch.no_grad():
        model.transformer.wte.weight.zero_()
        model.transformer.wpe.weight.copy_(torch.eye(cfg.block_size, cfg.n_embd))
        w = model.transformer.h[0].attn.c_attn.weight  # (3C, C): q rows, then k rows, then v rows
        w.zero_()
        w[torch.arange(hs - 1), torch.arange(1, hs)] = 1.0  # head 0: q_t[i] = x_t[i + 1]
        w[cfg.n_embd + torch.arange(hs), torch.arange(hs)] = 1.0  # head 0: k_j[i] = x_j[i]
    return save_checkpoint(model, tok, tmp_path / "prev")


def test_a_previous_token_head_scores_as_one(tmp_path):
    corpus = write_docs(tmp_path / "docs.txt", DOCS)
    atlas(corpus, tmp_path / "out", checkpoint=previous_token_model(tmp_path), seq_len=32, batch_size=4)
    got = read_atlas(tmp_path / "out")
    assert got.maps["previous_token"][0, 0] >= 0.99
    assert got.maps["previous_token"][0, 1] < 0.5  # the other head has no such weights
    assert got.maps["mean_distance"][0, 0] == pytest.approx(1.0, abs=0.05)
    assert all(r["value"] >= 0.99 for r in got.exemplars[(0, 0)]["previous_token"])


def run_batches(lm, corpus, batch_size):
    wins = windows(token_stream(open_corpus([corpus]).documents(), lm.tokenizer), SEQ_LEN)
    return list(batches(wins, batch_size))


def test_tallies_merge_to_the_same_exemplars_in_any_order(models, tmp_path):
    lm, _ = models["shipped"]
    parts = [batch_tally(lm.backend, b, LOCAL, K) for b in run_batches(lm, write_docs(tmp_path / "d.txt", DOCS), 2)]
    assert len(parts) >= 4
    totals = []
    for order in (range(len(parts)), reversed(range(len(parts))), [2, 0, 3, 1, *range(4, len(parts))]):
        total = Tally.empty(parts[0].layers, parts[0].n_head, K)
        for i in order:
            total.add(parts[i])
        totals.append(total)
    for t in totals[1:]:
        for name in ("value", "window", "pos", "context", "count", "hist"):
            assert np.array_equal(getattr(t, name), getattr(totals[0], name)), name
        np.testing.assert_allclose(t.sum, totals[0].sum, rtol=1e-12)


def test_a_state_from_before_the_divergence_bins_loads_and_merges(models, tmp_path):
    """State files written before the divergence metric hold one histogram bin fewer a head; none of
    the other metrics ever reaches the last bin, so an older state loads padded and merges."""
    lm, _ = models["shipped"]
    part = batch_tally(lm.backend, run_batches(lm, write_docs(tmp_path / "d.txt", DOCS), 2)[0], LOCAL, K)
    arrays = part.to_arrays()
    assert not arrays["hist"][..., -1].any()
    older = Tally.from_arrays(dict(arrays, hist=arrays["hist"][..., :-1]))
    older.add(part)
    assert np.array_equal(older.hist, 2 * part.hist) and np.array_equal(older.count, 2 * part.count)


def test_resume_ends_with_the_same_bits(models, tmp_path):
    lm, _ = models["shipped"]
    corpus = write_docs(tmp_path / "docs.txt", DOCS * 3)
    opts = dict(model=lm, seq_len=SEQ_LEN, batch_size=2, local_window=LOCAL, exemplars=K)
    atlas(corpus, tmp_path / "whole", **opts)

    def stop_after_three(tally):
        if tally.batches == 3:
            raise KeyboardInterrupt

    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        atlas(corpus, out, after_batch=stop_after_three, **opts)
    partial = read_atlas(out)  # a valid atlas of what was done
    assert not partial.meta["complete"] and partial.meta["batches"] == 3 and (out / STATE_FILE).is_file()
    with pytest.raises(AtlasError, match="--resume"):
        atlas(corpus, out, **opts)
    with pytest.raises(AtlasError, match="seq_len"):
        atlas(corpus, out, resume=True, **(opts | {"seq_len": 16}))
    atlas(corpus, out, resume=True, **opts)
    assert not (out / STATE_FILE).exists() and read_atlas(out).meta["complete"]
    for name in (HEADS_FILE, EXEMPLARS_FILE):
        assert pq.read_table(out / name).equals(pq.read_table(tmp_path / "whole" / name), check_metadata=True), name
    with pytest.raises(AtlasError, match="nothing to resume"):
        atlas(corpus, out, resume=True, **opts)


def test_max_tokens_caps_the_tokens_seen(models, tmp_path):
    lm, _ = models["shipped"]
    corpus = write_docs(tmp_path / "d.txt", DOCS)
    atlas(corpus, tmp_path / "out", model=lm, seq_len=SEQ_LEN, batch_size=2, max_tokens=50)
    meta = read_atlas(tmp_path / "out").meta
    assert meta["tokens_seen"] == 50 and meta["windows"] == math.ceil(50 / SEQ_LEN)


def implicit_reference(lm, layer: int, docs) -> dict[str, np.ndarray]:
    """Per metric (heads, R) row values of implicit layer ``layer`` over every window, from M by hand: each window
    alone through the model with its mixers' scans recorded, M from :mod:`model.families.mixers` (Scan.rows),
    p = |M| normalised per row in float64."""
    from attnscope.model.families.implicit import recording_scans

    per_window = []
    for w in reference_windows(lm.tokenizer, docs, SEQ_LEN):
        with torch.no_grad(), recording_scans(lm.backend.model) as scans:
            lm.backend.trunk(input_ids=torch.tensor([w]), use_cache=False)
        M = np.abs(scans[layer].rows(0, len(w)).double().numpy())  # (heads, T, T)
        assert (M.sum(-1) > 0).all()
        per_window.append(row_metrics((M / M.sum(-1, keepdims=True))[None], LOCAL))
    return {m: np.concatenate([pw[m][0][..., FIRST_ROW.get(m, 1) - 1 :] for pw in per_window], -1) for m in METRICS}


def implicit_induction_reference(lm, layer: int) -> np.ndarray:
    """(heads,) the induction score of implicit layer ``layer`` on the atlas's probe, p = |M| normalised per row."""
    from attnscope.model.families.implicit import recording_scans

    tok, facts = lm.tokenizer, lm.facts
    n = min(40, (facts.block_size - 1) // 2)
    rand = induction_tokens(facts.vocab_size, n=n, pool=random_pool(tok, facts.vocab_size))
    start = probe_prefix(tok) or tok.encode_ids("")[:1]
    ids = torch.cat([torch.tensor(start, dtype=torch.long).expand(rand.size(0), len(start)), rand, rand], dim=1)
    p = []
    for row in ids:
        with torch.no_grad(), recording_scans(lm.backend.model) as scans:
            lm.backend.trunk(input_ids=row[None], use_cache=False)
        M = np.abs(scans[layer].rows(0, ids.shape[1]).double().numpy())
        p.append(M / M.sum(-1, keepdims=True))
    return induction_score(torch.from_numpy(np.stack(p)[:, None]), len(start), n).mean(0)[0].numpy()


def test_a_hybrids_implicit_heads_are_measured_on_abs_m_normalised(tmp_path):
    """On Qwen3-Next (Gated DeltaNet in layers 0 and 2) the atlas measures the softmax layers and the implicit
    ones, under the model's layer numbers: each implicit head's metrics are those of p = |M| / Σ_s |M| per row,
    M computed here from the mixer's own scan (no sinks: no sink_mass); meta.json says the rule."""
    path = build("qwen3_next", tmp_path / "qwen3_next")
    lm = load_model(path, "cpu")
    corpus = write_docs(tmp_path / "docs.txt", DOCS)
    atlas(corpus, tmp_path / "out", model=lm, seq_len=SEQ_LEN, batch_size=BATCH, local_window=LOCAL, exemplars=K)
    got = read_atlas(tmp_path / "out")
    about = got.meta["model"]
    assert about["attention_layers"] == [1, 3] and got.layers == [0, 1, 2, 3]
    implicit = about["implicit_layers"]
    assert "|M[t, s]|" in implicit["rule"] and implicit["skipped"] == []
    assert [(m["layer"], m["mixer"]) for m in implicit["measured"]] == [(0, "gated_deltanet"), (2, "gated_deltanet")]
    heads = implicit["measured"][0]["heads"]
    table = pq.read_table(tmp_path / "out" / HEADS_FILE).to_pydict()
    for layer in (0, 2):
        rows = [i for i, x in enumerate(table["layer"]) if x == layer]
        assert len(rows) == heads and {table["mixer"][i] for i in rows} == {"gated_deltanet"}
        assert all(table["implicit"][i] for i in rows) and "sink_mass" not in table  # no layer has sinks
        values = implicit_reference(lm, layer, DOCS)
        for m in METRICS:
            if m == "sink_mass":
                continue
            v, i = values[m], got.layers.index(layer)
            assert (got.counts[m][i, :heads] == v.shape[-1]).all(), m
            np.testing.assert_allclose(got.maps[m][i, :heads], v.mean(-1), rtol=0, atol=TOL * max(1.0, np.abs(v).max()),
                                       err_msg=f"{layer} {m}")
        np.testing.assert_allclose(got.maps["induction"][got.layers.index(layer), :heads],
                                   implicit_induction_reference(lm, layer), rtol=0, atol=TOL)
    assert all(not x for x, layer in zip(table["implicit"], table["layer"]) if layer in (1, 3))


def test_falcon_h1s_mixers_beside_attention_are_named_as_skipped(tmp_path):
    """Falcon-H1 runs Mamba-2 beside the attention in every layer: the atlas measures the softmax heads and names
    each layer's mixer as skipped, with the reason (the rows are (layer, head))."""
    path = build("falcon_h1", tmp_path / "falcon_h1")
    corpus = write_docs(tmp_path / "docs.txt", DOCS)
    atlas(corpus, tmp_path / "out", checkpoint=path, seq_len=SEQ_LEN, batch_size=BATCH, local_window=LOCAL)
    got = read_atlas(tmp_path / "out")
    about = got.meta["model"]
    assert got.layers == about["attention_layers"] == list(range(about["n_layer"]))
    implicit = about["implicit_layers"]
    assert implicit["measured"] == []
    assert [(m["layer"], m["mixer"]) for m in implicit["skipped"]] == [(i, "mamba2") for i in got.layers]
    assert all("beside softmax attention" in m["why"] for m in implicit["skipped"])
    assert not any(pq.read_table(tmp_path / "out" / HEADS_FILE).to_pydict()["implicit"])
