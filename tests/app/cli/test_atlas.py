"""``attnscope atlas`` on the command line, and the corpus it reads: three formats, and every bad
file stopped with one line naming it, before anything is written."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from attnscope.app.cli.main import main
from attnscope.model.atlas.corpus import CorpusError, batches, open_corpus, windows
from attnscope.model.atlas.read import EXEMPLARS_FILE, HEADS_FILE, META_FILE, read_atlas

TEXTS = [
    "The cat sat on the mat. The dog sat on the log.",
    "She told her brother that the train would leave at noon,\nso they packed early.",
    "A small dog ran across the park and chased the ball.",
]


def corpus_files(root):
    """The same three documents as .txt, .jsonl and .parquet."""
    root.mkdir(parents=True, exist_ok=True)
    txt = root / "docs.txt"
    txt.write_text("\n\n  \n".join(TEXTS) + "\n", encoding="utf-8")
    jsonl = root / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(TEXTS)) + "\n")
    parquet = root / "docs.parquet"
    pq.write_table(pa.table({"id": list(range(3)), "text": TEXTS}), parquet)
    return txt, jsonl, parquet


def test_the_three_formats_read_the_same_documents(tmp_path):
    for path in corpus_files(tmp_path):
        corpus = open_corpus([path])
        assert list(corpus.documents()) == TEXTS, path.suffix
        assert corpus.files[0].documents == 3 and len(corpus.sha256) == 64
    a, b = open_corpus(corpus_files(tmp_path)), open_corpus(list(reversed(corpus_files(tmp_path))))
    assert a.sha256 != b.sha256  # the order of the files is part of the corpus


def test_windows_are_cut_end_to_end_and_capped():
    docs = [[1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11, 12, 13, 14, 15]]
    assert [w.tolist() for w in windows(docs, 4)] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15]]
    assert [w.tolist() for w in windows(docs, 4, max_tokens=9)] == [[1, 2, 3, 4], [5, 6, 7, 8]]  # a 1-token tail: none
    assert [w.tolist() for w in windows(docs, 4, max_tokens=10)] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    got = list(batches(windows(docs, 4), 2))
    assert [(b.index, b.window0, b.ids.shape) for b in got] == [(0, 0, (2, 4)), (1, 2, (1, 4)), (2, 3, (1, 3))]


def bad_files(root):
    """case -> (the file, what the one line must say besides its name)."""
    root.mkdir()
    (root / "empty.txt").write_text("\n  \n\n")
    (root / "latin1.txt").write_bytes("fine line\ncaf\xe9 au lait\n".encode("latin-1"))
    (root / "notext.jsonl").write_text('{"text": "one"}\n\n{"body": "two"}\n')
    (root / "broken.jsonl").write_text('{"text": "one"}\n{"text": \n')
    pq.write_table(pa.table({"body": ["a", "b"]}), root / "notext.parquet")
    (root / "garbage.parquet").write_bytes(b"not parquet at all")
    (root / "docs.csv").write_text("text\nhello\n")
    return {
        "missing": (root / "missing.txt", "no such file"),
        "empty": (root / "empty.txt", "no documents"),
        "not utf-8": (root / "latin1.txt", ":2: not UTF-8"),
        "jsonl without text": (root / "notext.jsonl", ":3: no string field 'text'"),
        "jsonl not json": (root / "broken.jsonl", ":2: not JSON"),
        "parquet without text": (root / "notext.parquet", "no 'text' column"),
        "not parquet": (root / "garbage.parquet", "not a Parquet file"),
        "unknown format": (root / "docs.csv", "unknown corpus format"),
    }


CASES = ["missing", "empty", "not utf-8", "jsonl without text", "jsonl not json", "parquet without text",
         "not parquet", "unknown format"]


@pytest.mark.parametrize("case", CASES)
def test_a_bad_corpus_file_is_one_line_and_nothing_is_written(case, tmp_path, capsys):
    path, says = bad_files(tmp_path / "bad")[case]
    good, *_ = corpus_files(tmp_path / "good")
    with pytest.raises(CorpusError, match=says):
        open_corpus([good, path])
    out = tmp_path / "out"
    assert main(["atlas", "--corpus", str(good), str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("attnscope: ") and str(path) in err and says in err
    assert not out.exists()
    out.mkdir()  # an --out that exists stays as it was
    assert main(["atlas", "--corpus", str(path), "--out", str(out)]) == 1
    assert list(out.iterdir()) == []


def test_the_command_writes_an_atlas_and_caps_the_tokens(tmp_path, capsys):
    files = [str(p) for p in corpus_files(tmp_path / "c")]
    out = tmp_path / "atlas"
    args = ["atlas", "--corpus", *files, "--out", str(out), "--seq-len", "16", "--batch-size", "2", "--exemplars", "3"]
    assert main([*args, "--max-tokens", "70"]) == 0
    assert f"atlas of 70 tokens (5 windows) written to {out}" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {HEADS_FILE, EXEMPLARS_FILE, META_FILE}
    got = read_atlas(out)
    meta = got.meta
    assert meta["complete"] and meta["tokens_seen"] == 70 and meta["settings"]["seq_len"] == 16
    assert [f["format"] for f in meta["corpus"]["files"]] == ["text", "jsonl", "parquet"]
    assert meta["model"]["name"] == "attnscope" and meta["attnscope_version"]
    assert got.maps["previous_token"].shape == (4, 4) and got.counts["self"][0, 0] == 70 - 5  # row 0 of each window out
    heads = pq.read_table(out / HEADS_FILE)
    # one row per (layer, head), four columns per metric: six row metrics (no learned sinks) and induction
    metrics = ["first_token", "previous_token", "self", "entropy", "mean_distance", "local_fraction", "induction"]
    parts = ("", "_std", "_count", "_histogram")
    assert heads.column_names == ["layer", "head", "implicit", "mixer", *(m + p for m in metrics for p in parts)]
    assert heads.num_rows == 4 * 4
    for m in metrics:
        edges = meta["metrics"][m]["bin_edges"]
        assert all(len(edges) == len(h) + 1 for h in heads[f"{m}_histogram"].to_pylist())
    assert len(got.exemplars[(0, 0)]["entropy"]) == 3
    assert main([*args, "--seq-len", "100000"]) == 1  # longer than the model's context
    assert "context" in capsys.readouterr().err


def test_a_differential_model_is_refused_in_one_line(tmp_path, capsys):
    """DiffLlama's maps are signed (first − λ·second): the atlas's metrics are defined for softmax rows."""
    pytest.importorskip("transformers")
    from tests.kit.family import build

    model = build("diffllama", tmp_path / "diffllama")
    capsys.readouterr()  # building it printed transformers' progress bars
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat on the mat. " * 20, encoding="utf-8")
    assert main(["atlas", "--checkpoint", str(model), "--corpus", str(corpus), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "differential attention" in err.splitlines()[-1] and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_stack_of_an_encoder_decoder_and_a_stack_the_model_lacks(tmp_path, capsys):
    """--stack cross on a tiny BART: the cross stack's layers and heads, the metadata naming the stack and its
    target; --stack encoder on the shipped decoder: one line, exit 1, nothing written."""
    pytest.importorskip("transformers")
    from tests.kit.seq2seq import build_seq2seq

    model = build_seq2seq("bart", tmp_path / "bart")
    capsys.readouterr()
    files = [str(p) for p in corpus_files(tmp_path / "c")]
    out = tmp_path / "atlas"
    args = ["atlas", "--corpus", *files, "--seq-len", "16", "--batch-size", "2", "--exemplars", "2"]
    assert main([*args, "--checkpoint", str(model), "--out", str(out), "--stack", "cross"]) == 0
    got = read_atlas(out)
    assert got.meta["model"]["stack"] == "cross" and got.meta["settings"]["stack"] == "cross"
    assert "teacher-forced" in got.meta["model"]["target"] and got.meta["model"]["architecture"] == "encoder-decoder"
    assert got.maps["entropy"].shape == (2, 4)  # the cross stack's 2 layers × 4 heads
    capsys.readouterr()
    bad = tmp_path / "bad"
    assert main([*args, "--out", str(bad), "--stack", "encoder"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no encoder stack" in err and "--stack" in err
    assert not bad.exists() or not any(bad.iterdir())
