"""Corpus building on small fake sources written in tmp_path (never the system's files)."""

from __future__ import annotations

import json

import pytest
from attnscope.model.ours import corpus
from attnscope.model.ours.corpus import (
    DOC_SEPARATOR,
    Document,
    as_typed,
    build,
    gnome_documents,
    handbook_documents,
    is_validation,
    pydoc_documents,
    read_documents,
    wordnet_documents,
)


def first_id(prefix: str, validation: bool) -> str:
    """The first id ``prefix/i`` that the held-out rule sends to the wanted split."""
    return next(f"{prefix}/{i}" for i in range(10_000) if is_validation(f"{prefix}/{i}") == validation)


def test_held_out_rule_is_stable_and_about_two_percent():
    ids = [f"doc/{i}" for i in range(20_000)]
    share = sum(map(is_validation, ids)) / len(ids)
    assert 0.012 < share < 0.028  # 5/256 ≈ 1.95 %; the standard error here is 0.1 %
    assert [is_validation(i) for i in ids[:100]] == [is_validation(i) for i in ids[:100]]


@pytest.mark.parametrize(
    ("raw", "typed"),
    [
        ("the dog barked", "The dog barked."),
        ("  is it raining ", "Is it raining."),
        ("she said 'no'", "She said 'no'"),
        ("Stop!", "Stop!"),
        ("", ""),
    ],
)
def test_as_typed(raw, typed):
    assert as_typed(raw) == typed


def test_read_documents_splits_on_the_separator(tmp_path):
    docs = ["first doc\nwith two lines", "second", "third <|endoftext|> inline stays"]
    path = tmp_path / "split.txt"
    path.write_text("".join(d + "\n" + DOC_SEPARATOR + "\n" for d in docs) + "\n\n")
    assert read_documents(path) == docs


def test_wordnet_documents(tmp_path):
    (tmp_path / "data.noun").write_text(
        "  1 This software and database is being provided\n"  # licence header
        '00001740 03 n 01 big_dog 0 000 | a large dog; "the big dog barked at the mailman"; "too short"\n'
        "00001741 03 n 01 cat 0 000 | a small feline\n"
    )
    docs = list(wordnet_documents(str(tmp_path)))
    by_source = {d.source: d.text for d in docs}
    assert by_source["wordnet-examples"] == "The big dog barked at the mailman."
    assert by_source["wordnet-glosses"] == "Big dog: a large dog. Cat: a small feline."


def test_gnome_documents(tmp_path):
    (tmp_path / "net.page").write_text(
        '<page xmlns="http://projectmallard.org/1.0/"><title>Connect to a network</title>'
        "<p>Open the <gui>Settings</gui> window and choose Network.</p><p>Hi</p></page>"
    )
    (tmp_path / "broken.page").write_text("<page><p>unclosed")
    docs = list(gnome_documents(str(tmp_path)))
    assert len(docs) == 1
    assert docs[0].text == "Connect to a network\nOpen the Settings window and choose Network."


def test_handbook_documents_skip_code(tmp_path):
    (tmp_path / "ch1.html").write_text(
        "<html><body><h1>Installing the system</h1><p>The installer asks a few questions first.</p>"
        "<pre>apt-get install foo bar baz</pre><script>var a = 1 + 2 + 3;</script>"
        "<p>Too short.</p><li>Choose a mirror close to you.</li></body></html>"
    )
    (doc,) = handbook_documents(str(tmp_path))
    assert doc.text.split("\n") == ["The installer asks a few questions first.", "Choose a mirror close to you."]


def test_pydoc_keeps_prose_only(tmp_path):
    (tmp_path / "tutorial.rst.txt").write_text(
        "Using lists\n===========\n\n"
        "The :func:`len` function returns the number of items in a list, see `the tutorial <https://x>`_ for more.\n\n"
        ".. note::\n\n   A directive is skipped entirely.\n\n"
        ">>> print(1)\n1\n\n"
        "    indented code block is skipped as well\n\n"
        "Short line.\n"
    )
    (doc,) = pydoc_documents(str(tmp_path))
    assert doc.text == "The len function returns the number of items in a list, see the tutorial for more."


def test_build_splits_weights_and_collects_sentences(tmp_path, monkeypatch):
    train_id, val_id = first_id("wordnet/examples", False), first_id("wordnet/examples", True)
    docs = [
        # example sentences: one per line, each written as its own document
        Document("wordnet-examples", train_id, "The dog barked.\nA cat sat.", True),
        Document("wordnet-examples", val_id, "It rained all day.\nWas it cold?\nYes.", True),
        Document("python3-doc", first_id("pydoc", False), "Lists hold items in order."),
    ]
    monkeypatch.setattr(corpus, "all_documents", lambda: iter(docs))
    stats = build(tmp_path / "out")
    train = read_documents(tmp_path / "out" / "train.txt")
    val = read_documents(tmp_path / "out" / "val.txt")
    n = corpus.copies(docs[0])
    assert n == int(corpus.WEIGHTS["wordnet-examples"])  # an integer weight: that many copies
    assert train == ["The dog barked.", "A cat sat."] * n + ["Lists hold items in order."]
    assert val == ["It rained all day.", "Was it cold?", "Yes."]  # held-out documents once
    sentences = (tmp_path / "out" / "sentences_val.txt").read_text().splitlines()
    assert sentences == ["It rained all day.", "Was it cold?", "Yes."]
    assert stats["wordnet-examples"]["documents"] == 2
    assert stats["sentences_val"] == {"sentences": 3}
    assert json.loads((tmp_path / "out" / "stats.json").read_text()) == stats


def test_fractional_weight_keeps_a_stable_share(monkeypatch):
    monkeypatch.setitem(corpus.WEIGHTS, "wordnet-glosses", 0.4)
    docs = [Document("wordnet-glosses", f"wordnet/glosses/{i}", "x") for i in range(4000)]
    kept = [corpus.copies(d) for d in docs]
    assert set(kept) <= {0, 1}
    assert abs(sum(kept) / len(kept) - 0.4) < 0.03  # sha1 bytes are close to uniform
    assert kept == [corpus.copies(d) for d in docs]  # the same documents every run


def test_no_source_installed_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    for name in ("WORDNET_DIR", "GNOME_HELP", "HANDBOOK", "PYDOC"):
        monkeypatch.setattr(corpus, name, str(tmp_path / "absent" / name))
    with pytest.raises(SystemExit) as info:
        corpus.main(["--out", str(tmp_path / "corpus")])
    assert info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "apt-get install wordnet-base" in err
    assert not (tmp_path / "corpus").exists()
