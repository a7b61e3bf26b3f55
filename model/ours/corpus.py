"""Build the training corpus offline from Debian packages of modern English text.

Sources (``apt-get install wordnet-base gnome-user-docs debian-handbook python3-doc``):

=================  ==============================================  =========================
package            text taken                                       licence
=================  ==============================================  =========================
wordnet-base       example sentences and glosses of every synset   WordNet 3.0 (BSD-like)
gnome-user-docs    paragraphs and titles of the GNOME help pages   CC-BY-SA 3.0
debian-handbook    paragraphs of The Debian Administrator's Hbk.   GPL-2+ / CC-BY-SA 3.0
python3-doc        prose paragraphs of the Python documentation    PSF licence
=================  ==============================================  =========================

Held-out rule: a document goes to the validation split when the first byte of
``sha1(doc_id)`` is below 5 (5/256 ≈ 2 %); the rest is training text. The rule depends on
the document's id only, so it is stable across runs and machines.

WordNet examples are written the way people type: first letter capitalised and a full stop
added when the sentence has no final punctuation. Each example sentence is its own document;
in the training split they are weighted ×3 and glosses ×0.4 (see :data:`WEIGHTS`). The
held-out WordNet example sentences are also written one per line to ``sentences_val.txt``,
one of the two sentence sets on which bits per byte is reported (the other is the
hand-written ``model/ours/evalsets/everyday.txt``).

Run: ``python -m attnscope.model.ours.corpus --out data/corpus``.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import html.parser
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

WORDNET_DIR = "/usr/share/wordnet"
GNOME_HELP = "/usr/share/help/C"
HANDBOOK = "/usr/share/doc/debian-handbook/html/en-US"
PYDOC = "/usr/share/doc/python3/html/_sources"
DOC_SEPARATOR = "<|endoftext|>"
VAL_THRESHOLD = 5  # out of 256
# How many times a training document is written. WordNet's example sentences are the closest
# to text as people type it, so they are repeated; its glosses (definitions, mostly lower-case
# fragments) are thinned. A fractional weight keeps a stable hash-chosen share of a copy.
# The held-out split keeps every document once.
WEIGHTS = {"wordnet-examples": 3.0, "wordnet-glosses": 0.4}


@dataclass
class Document:
    source: str
    doc_id: str
    text: str
    lines_are_documents: bool = False  # write each line as its own document


def copies(doc: Document) -> int:
    """Times a training document is written, from :data:`WEIGHTS` (stable per document)."""
    w = WEIGHTS.get(doc.source, 1.0)
    frac = hashlib.sha1((doc.doc_id + "#copies").encode()).digest()[0] / 256
    return int(w) + (1 if frac < w - int(w) else 0)


def is_validation(doc_id: str) -> bool:
    return hashlib.sha1(doc_id.encode()).digest()[0] < VAL_THRESHOLD


def _squash(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def as_typed(sentence: str) -> str:
    """'the dog barked' -> 'The dog barked.'"""
    s = sentence.strip()
    if not s:
        return s
    s = s[0].upper() + s[1:]
    if s[-1] not in ".!?\"'":
        s += "."
    return s


# ---------------------------------------------------------------------------- WordNet


def wordnet_documents(root: str = WORDNET_DIR, chunk: int = 8) -> Iterator[Document]:
    examples: list[str] = []
    glosses: list[str] = []
    for pos in ("noun", "verb", "adj", "adv"):
        path = Path(root) / f"data.{pos}"
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("  ") or "|" not in line:
                continue  # licence header
            head, gloss = line.split("|", 1)
            lemma = head.split()[4].replace("_", " ")
            quoted = re.findall(r'"([^"]+)"', gloss)
            definition = _squash(re.sub(r'"[^"]*"', "", gloss)).strip(" ;:")
            if definition:
                glosses.append(f"{lemma[0].upper() + lemma[1:]}: {definition}.")
            examples.extend(as_typed(_squash(q)) for q in quoted if len(q.split()) >= 3)
    # Examples are grouped in chunks of ``chunk`` for the split, but each sentence is its own
    # document: the model then sees many sentences begin right after <|endoftext|>, the way a
    # typed sentence is scored. Glosses stay in running chunks.
    for i in range(0, len(examples), chunk):
        yield Document("wordnet-examples", f"wordnet/examples/{i // chunk}", "\n".join(examples[i : i + chunk]), True)
    for i in range(0, len(glosses), chunk):
        yield Document("wordnet-glosses", f"wordnet/glosses/{i // chunk}", " ".join(glosses[i : i + chunk]))


# ------------------------------------------------------------------------ GNOME help


def gnome_documents(root: str = GNOME_HELP) -> Iterator[Document]:
    for path in sorted(glob.glob(f"{root}/**/*.page", recursive=True)):
        try:
            tree = ET.parse(path)
        except ET.ParseError:
            continue
        paras = []
        for el in tree.iter():
            tag = el.tag.rsplit("}", 1)[-1]
            if tag in ("title", "p"):
                text = _squash("".join(el.itertext()))
                if len(text.split()) >= 2:
                    paras.append(text)
        if paras:
            yield Document("gnome-user-docs", "gnome/" + str(Path(path).relative_to(root)), "\n".join(paras))


# ------------------------------------------------------------------- Debian handbook


class _ParagraphParser(html.parser.HTMLParser):
    BLOCKS = {"p", "li", "h1", "h2", "h3", "h4", "dt", "dd", "td"}
    SKIP = {"pre", "script", "style", "code"}

    def __init__(self):
        super().__init__()
        self.paras: list[str] = []
        self._buf: list[str] = []
        self._depth_skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP and tag != "code":
            self._depth_skip += 1
        if tag in self.BLOCKS:
            self._flush()

    def handle_endtag(self, tag):
        if tag in self.SKIP and tag != "code":
            self._depth_skip = max(0, self._depth_skip - 1)
        if tag in self.BLOCKS:
            self._flush()

    def handle_data(self, data):
        if not self._depth_skip:
            self._buf.append(data)

    def _flush(self):
        text = _squash("".join(self._buf))
        self._buf = []
        if len(text.split()) >= 4:
            self.paras.append(text)


def handbook_documents(root: str = HANDBOOK) -> Iterator[Document]:
    for path in sorted(glob.glob(f"{root}/*.html")):
        parser = _ParagraphParser()
        parser.feed(Path(path).read_text(encoding="utf-8", errors="replace"))
        parser._flush()
        if parser.paras:
            yield Document("debian-handbook", "handbook/" + Path(path).name, "\n".join(parser.paras))


# -------------------------------------------------------------------- Python docs


def _rst_prose(text: str) -> list[str]:
    """Prose paragraphs of a reStructuredText page: no code, directives or tables."""
    paras = []
    for block in re.split(r"\n\s*\n", text):
        if not block.strip() or block.startswith((" ", "\t", "..", ">>>", "|", "+", "=", "-", "*")):
            continue
        if re.search(r"^[=\-~^*#]{3,}\s*$", block, flags=re.M):
            continue  # section underline: a heading
        s = re.sub(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", block)  # :func:`x` -> x
        s = re.sub(r"`([^`<]*?)\s*<[^>]*>`_+", r"\1", s)  # `text <url>`_ -> text
        s = s.replace("``", "").replace("`", "").replace("**", "").replace("::", ":")
        s = _squash(s)
        letters = sum(c.isalpha() or c == " " for c in s)
        if len(s.split()) >= 6 and letters / max(1, len(s)) > 0.85:
            paras.append(s)
    return paras


def pydoc_documents(root: str = PYDOC) -> Iterator[Document]:
    for path in sorted(glob.glob(f"{root}/**/*.rst.txt", recursive=True)):
        paras = _rst_prose(Path(path).read_text(encoding="utf-8", errors="replace"))
        if paras:
            yield Document("python3-doc", "pydoc/" + str(Path(path).relative_to(root)), "\n".join(paras))


# -------------------------------------------------------------------------- build


def all_documents() -> Iterator[Document]:
    yield from wordnet_documents()
    yield from gnome_documents()
    yield from handbook_documents()
    yield from pydoc_documents()


def build(out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    stats: dict[str, dict[str, int]] = {}
    sentences_val = []
    with open(out / "train.txt", "w", encoding="utf-8") as ftrain, open(out / "val.txt", "w", encoding="utf-8") as fval:
        for doc in all_documents():
            split = "val" if is_validation(doc.doc_id) else "train"
            n = 1 if split == "val" else copies(doc)
            pieces = doc.text.split("\n") if doc.lines_are_documents else [doc.text]
            block = "".join(p + "\n" + DOC_SEPARATOR + "\n" for p in pieces)
            (fval if split == "val" else ftrain).write(block * n)
            s = stats.setdefault(doc.source, {"documents": 0, "bytes_train": 0, "bytes_val": 0, "weight": 0.0})
            s["documents"] += 1
            s["weight"] = WEIGHTS.get(doc.source, 1.0)
            s["bytes_" + split] += len(doc.text.encode()) * n
            if split == "val" and doc.source == "wordnet-examples":
                sentences_val.extend(pieces)
    (out / "sentences_val.txt").write_text("\n".join(sentences_val) + "\n", encoding="utf-8")
    stats["sentences_val"] = {"sentences": len(sentences_val)}
    (out / "stats.json").write_text(json.dumps(stats, indent=2))
    return stats


def read_documents(path: Path) -> list[str]:
    """Documents of a split file written by :func:`build`."""
    text = Path(path).read_text(encoding="utf-8")
    return [d.strip("\n") for d in text.split("\n" + DOC_SEPARATOR + "\n") if d.strip()]


PACKAGES = {  # the Debian package that brings each source folder
    "wordnet-base": lambda: WORDNET_DIR,
    "gnome-user-docs": lambda: GNOME_HELP,
    "debian-handbook": lambda: HANDBOOK,
    "python3-doc": lambda: PYDOC,
}


def missing_packages() -> list[str]:
    """The source packages whose folders are not on this machine."""
    return [name for name, folder in PACKAGES.items() if not Path(folder()).is_dir()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m attnscope.model.ours.corpus", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("data/corpus"))
    args = ap.parse_args(argv)
    missing = missing_packages()
    if len(missing) == len(PACKAGES):  # nothing to read: say so before writing anything
        ap.exit(1, f"{ap.prog}: no corpus sources on this machine: apt-get install {' '.join(missing)}\n")
    if missing:
        print(f"{ap.prog}: building without {', '.join(missing)} (not installed)", file=sys.stderr)
    print(json.dumps(build(args.out), indent=2))


if __name__ == "__main__":
    main()
