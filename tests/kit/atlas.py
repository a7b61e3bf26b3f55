"""Two small head atlases of one model over one corpus, for the tests of the atlas routes and page:
``first`` in windows of 32 tokens, ``second`` of 16 (the same shape, so they have a difference); the
windows an atlas cuts a corpus into, computed apart from the atlas; the atlas tests' documents and
the Jensen-Shannon divergence of attention rows, computed apart from the atlas too."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# four short English documents: the start of every atlas test's corpus
ENGLISH_DOCS = [
    "The cat sat on the mat. The dog sat on the log, and the cat watched the dog.",
    "She told her brother that the train would leave at noon, so they packed early.",
    "Open the Settings window, choose Network, and switch the connection on or off.",
    "A small dog ran across the park and chased the ball that the children had thrown.",
]

TEXTS = [
    "The cat sat on the mat. The dog sat on the log, and the cat saw the dog.",
    "Once upon a time a small fox read books about the sea, and the sea was wide.",
    "import numpy as np\nx = np.zeros(3)\nprint(x + 1)\n",
]


def reference_windows(tokenizer, docs, seq_len):
    """The windows, computed here: each document's ids (its BOS, or <|endoftext|> after it), end to end, cut."""
    stream = []
    for d in docs:
        ids = tokenizer.encode_ids(d)
        stream += ids if tokenizer.bos_id is not None else ids + [tokenizer.eot_id]
    cut = [stream[i : i + seq_len] for i in range(0, len(stream), seq_len)]
    return [w for w in cut if len(w) >= 2]


def write_docs(path: Path, docs: list[str]) -> Path:
    """``docs`` as a .txt corpus (a document a paragraph) at ``path``; returns ``path``."""
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def js_rows(pa: np.ndarray, pb: np.ndarray) -> np.ndarray:
    """The JS divergence in bits of every row pair, 0·log 0 = 0: (..., T, S) -> (..., T)."""
    m = (pa + pb) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        ka = np.where(pa > 0, pa * np.log2(pa / m), 0.0).sum(-1)
        kb = np.where(pb > 0, pb * np.log2(pb / m), 0.0).sum(-1)
    return (ka + kb) / 2


def two_atlases(root: Path, checkpoint: Path | None = None) -> tuple[Path, Path]:
    """Write the corpus and the two atlases under ``root``; ``checkpoint`` None: the shipped model."""
    from attnscope.model.atlas.build import atlas

    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(TEXTS * 4), encoding="utf-8")
    first = atlas([corpus], root / "first", checkpoint=checkpoint, seq_len=32, batch_size=4, progress=False)
    second = atlas([corpus], root / "second", checkpoint=checkpoint, seq_len=16, batch_size=4, progress=False)
    return first, second

# accents, curly quotes, CJK, emoji (joined and flags), other scripts, and stretches of whitespace only
# (one a document of its own): a byte-level BPE cuts these characters into byte pieces
MULTIBYTE = [
    "Café déjà vu: the naïve façade, crème brûlée and señor Müller’s “quoted” words — «guillemets» too.",
    "東京は日本の首都です。人口は約千四百万人で、世界最大の都市圏の一つです。京都には古い寺が多い。",
    "Emoji 😀🎉🚀 and flags 🇫🇷🇯🇵 beside a coder 👩‍💻 and sparkles ✨✨ in a sentence.",
    "Ελληνικά και русский текст, עברית и العربية, 한국어 문장입니다. Ünïcödé ñ ø å ß œ.",
    " \t \u3000 \n \t\t  \u3000\u3000 \r\n" * 12,
    "def f(x):\n" + "    \n" * 30 + "    return “x” + ‘y’  # 引用 😀",
    "„Anführungszeichen“ und ‚einfache‘, 『括弧』と「かぎ」, ¿qué? ¡sí! … 🎈🎈🎈",
]


def multibyte_corpus(path: Path) -> Path:
    """The :data:`MULTIBYTE` documents as a JSONL corpus (a whitespace-only document needs JSONL)."""
    import json

    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in MULTIBYTE * 2), encoding="utf-8")
    return path
