"""Two small head atlases of one model over one corpus, for the tests of the atlas routes and page:
``first`` in windows of 32 tokens, ``second`` of 16 (the same shape, so they have a difference)."""

from __future__ import annotations

from pathlib import Path

TEXTS = [
    "The cat sat on the mat. The dog sat on the log, and the cat saw the dog.",
    "Once upon a time a small fox read books about the sea, and the sea was wide.",
    "import numpy as np\nx = np.zeros(3)\nprint(x + 1)\n",
]


def two_atlases(root: Path, checkpoint: Path | None = None) -> tuple[Path, Path]:
    """Write the corpus and the two atlases under ``root``; ``checkpoint`` None: the shipped model."""
    from attnscope.model.atlas import atlas

    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(TEXTS * 4), encoding="utf-8")
    first = atlas([corpus], root / "first", checkpoint=checkpoint, seq_len=32, batch_size=4, progress=False)
    second = atlas([corpus], root / "second", checkpoint=checkpoint, seq_len=16, batch_size=4, progress=False)
    return first, second
