"""The corpus a head atlas reads: its files checked and hashed, its documents, its windows.

Three formats, told by the file's extension:

==================  ==========================================================================
``.txt``, ``.text``  plain UTF-8 text, one document per paragraph: paragraphs are separated by
                     one or more blank (or whitespace-only) lines; a paragraph's own line
                     breaks are kept
``.jsonl``           one JSON object per line with a string ``text`` field (blank lines skipped), or
                     a conversation: ``{"messages": [{"role", "content"}, ...]}``, laid out by
                     the model's chat template (:mod:`.messages`)
``.parquet``         a string column ``text``, one document per row (null rows skipped)
==================  ==========================================================================

:func:`open_corpus` reads every file through once before anything else happens: a missing file,
an empty one, bytes that are not UTF-8, a JSONL line without ``text``, a Parquet file without a
``text`` column each raise :class:`CorpusError`, one line naming the file (and the line or
row), so that a bad corpus stops a run before it has written anything. The same pass computes
each file's SHA-256 and the corpus hash (the SHA-256 of the files' hashes, in order).

Documents become token windows (:func:`windows`): each document is tokenized by the model's
tokenizer (with the BOS a model's tokenizer adds to every text, as it saw in training; our GPT,
which has no BOS, gets ``<|endoftext|>`` after each document, as in its training corpus), the
tokens of all documents are laid end to end and cut into windows of ``seq_len`` tokens. The last
window may be shorter (it is dropped below 2 tokens: it would have no query with a key before
it). :func:`batches` groups windows of one length into ``(B, T)`` arrays.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .messages import Conversation, MessageIndex, conversation_of

FORMATS = {".txt": "text", ".text": "text", ".jsonl": "jsonl", ".parquet": "parquet"}
ENCODE_CHUNK = 64  # documents tokenized per call (the Rust tokenizer encodes a chunk in parallel)


class CorpusError(ValueError):
    """A corpus file that cannot be read as a corpus; the message is one line naming the file."""


@dataclass(frozen=True)
class CorpusFile:
    path: Path
    format: str  # "text", "jsonl" or "parquet"
    size: int  # bytes
    sha256: str
    documents: int
    conversations: int = 0  # of the documents, how many are conversations (JSONL ``messages``)

    def to_dict(self) -> dict:
        return {"path": str(self.path), "format": self.format, "bytes": self.size, "sha256": self.sha256,
                "documents": self.documents, "conversations": self.conversations}


@dataclass(frozen=True)
class Corpus:
    """Checked corpus files, in the order given; :meth:`documents` reads them again, streaming."""

    files: tuple[CorpusFile, ...]
    sha256: str  # SHA-256 of the files' SHA-256 hex digests, one per line, in order

    def documents(self) -> Iterator[str | Conversation]:
        for f in self.files:
            yield from _READERS[f.format](f.path)

    @property
    def conversations(self) -> int:
        return sum(f.conversations for f in self.files)


def open_corpus(paths: Iterable[str | Path]) -> Corpus:
    """Check and hash every file (see the module's docstring); :class:`CorpusError` on the first bad one."""
    files = []
    for p in paths:
        path = Path(p)
        fmt = FORMATS.get(path.suffix.lower())
        if fmt is None:
            raise CorpusError(f"{path}: unknown corpus format {path.suffix or '(no extension)'!r} "
                              f"(use {', '.join(FORMATS)})")
        if not path.is_file():
            raise CorpusError(f"{path}: no such file")
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        kinds = [isinstance(doc, Conversation) for doc in _READERS[fmt](path)]  # every line or row checked here
        if not kinds:
            raise CorpusError(f"{path}: no documents (the file is empty)")
        files.append(CorpusFile(path, fmt, path.stat().st_size, digest.hexdigest(), len(kinds), sum(kinds)))
    if not files:
        raise CorpusError("no corpus files given")
    whole = hashlib.sha256("".join(f.sha256 + "\n" for f in files).encode()).hexdigest()
    return Corpus(tuple(files), whole)


# ------------------------------------------------------------------ the three readers


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a UTF-8 file, its line break removed."""
    try:
        fh = path.open("rb")
    except OSError as e:
        raise CorpusError(f"{path}: cannot read it ({e.strerror or e})") from None
    with fh:
        for number, raw in enumerate(fh, 1):
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise CorpusError(f"{path}:{number}: not UTF-8 text (byte {e.start + 1} of the line)") from None


def read_text(path: Path) -> Iterator[str]:
    """Paragraphs separated by blank lines, each with its own line breaks."""
    para: list[str] = []
    for _, line in _lines(path):
        if line.strip():
            para.append(line)
        elif para:
            yield "\n".join(para)
            para = []
    if para:
        yield "\n".join(para)


def read_jsonl(path: Path) -> Iterator[str | Conversation]:
    """The ``text`` field of each line's JSON object, or its ``messages`` as a :class:`Conversation`."""
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}:{number}: not JSON ({e.msg})") from None
        if isinstance(obj, dict) and "messages" in obj and "text" not in obj:
            got = conversation_of(obj)
            if isinstance(got, str):
                raise CorpusError(f"{path}:{number}: {got}")
            yield got
            continue
        text = obj.get("text") if isinstance(obj, dict) else None
        if not isinstance(text, str):
            what = "not a JSON object" if not isinstance(obj, dict) else "no string field 'text' (nor 'messages')"
            raise CorpusError(f"{path}:{number}: {what}")
        yield text


def read_parquet(path: Path) -> Iterator[str]:
    """The ``text`` column, row by row (read a record batch at a time)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise CorpusError(f"{path}: not a Parquet file ({' '.join(str(e).split())[:200]})") from None
    schema = pf.schema_arrow
    if "text" not in schema.names:
        raise CorpusError(f"{path}: no 'text' column (columns: {', '.join(schema.names) or 'none'})")
    kind = schema.field("text").type
    is_view = getattr(pa.types, "is_string_view", lambda _: False)  # pyarrow 16 and later
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or is_view(kind)):
        raise CorpusError(f"{path}: column 'text' holds {kind}, not strings")
    for batch in pf.iter_batches(columns=["text"], batch_size=1024):
        for text in batch.column(0).to_pylist():
            if text is not None:
                yield text


_READERS = {"text": read_text, "jsonl": read_jsonl, "parquet": read_parquet}


# ------------------------------------------------------------------ tokens, windows, batches


def token_stream(
    documents: Iterable[str | Conversation], tokenizer, chat=None, index: MessageIndex | None = None
) -> Iterator[list[int]]:
    """Each document's token ids, as the model reads a text (its BOS first where it has one; our
    GPT's documents each followed by ``<|endoftext|>``). Documents are encoded a chunk at a time. A
    conversation goes through ``chat`` (the model's :class:`~model.chat.ChatTemplate`; none: a
    :class:`CorpusError`), as written (no generation prompt); ``index`` records where its messages fall."""
    bos = getattr(tokenizer, "bos_id", None)
    eot = getattr(tokenizer, "eot_id", None)
    after = [eot] if bos is None and eot is not None else []
    chunk: list[str] = []
    at = 0  # the stream's length so far
    for doc in documents:
        if isinstance(doc, Conversation):
            for ids in _encode(tokenizer, chunk) if chunk else []:
                at += len(ids) + len(after)
                yield ids + after
            chunk = []
            ids = _conversation_ids(doc, tokenizer, chat, at, index)
            at += len(ids)
            yield ids
            continue
        chunk.append(doc)
        if len(chunk) == ENCODE_CHUNK:
            for ids in _encode(tokenizer, chunk):
                at += len(ids) + len(after)
                yield ids + after
            chunk = []
    if chunk:
        yield from (ids + after for ids in _encode(tokenizer, chunk))


def _conversation_ids(doc: Conversation, tokenizer, chat, at: int, index: MessageIndex | None) -> list[int]:
    if chat is None:
        raise CorpusError("the corpus holds conversations (JSONL 'messages') and the model has no chat template")
    try:
        laid = chat.layout(tokenizer, list(doc.messages), add_generation_prompt=False)
    except ValueError as e:  # the template refuses the conversation
        raise CorpusError(f"a conversation of the corpus: {e}") from None
    if index is not None:
        index.add(at, laid.spans)
    return laid.ids


def _encode(tokenizer, texts: list[str]) -> list[list[int]]:
    """``tokenizer.encode_ids`` of each text; through the Rust tokenizer's batch call where there is one."""
    tk = getattr(tokenizer, "tk", None)
    if tk is None:
        return [tokenizer.encode_ids(t) for t in texts]
    bos = getattr(tokenizer, "bos_id", None)
    head = [bos] if bos is not None else []
    return [head + list(e.ids) for e in tk.encode_batch(texts, add_special_tokens=False)]


def windows(token_lists: Iterable[list[int]], seq_len: int, max_tokens: int | None = None) -> Iterator[np.ndarray]:
    """Cut the documents' tokens, end to end, into int64 windows of ``seq_len`` tokens; at most
    ``max_tokens`` tokens in all; a last window shorter than 2 tokens is dropped."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be at least 2, got {seq_len}")
    left = max_tokens if max_tokens is not None else float("inf")
    buf: list[int] = []
    for ids in token_lists:
        buf.extend(ids)
        while len(buf) >= seq_len and left >= seq_len:
            yield np.asarray(buf[:seq_len], dtype=np.int64)
            del buf[:seq_len]
            left -= seq_len
        if left < seq_len and len(buf) >= left:
            break
    tail = buf[: int(min(len(buf), left))]
    if len(tail) >= 2:
        yield np.asarray(tail, dtype=np.int64)


@dataclass(frozen=True)
class Batch:
    index: int  # the batch's number, 0, 1, ... in corpus order
    window0: int  # the number of its first window
    ids: np.ndarray  # (B, T) int64


def batches(wins: Iterable[np.ndarray], batch_size: int) -> Iterator[Batch]:
    """Consecutive windows of one length, ``batch_size`` at a time (a shorter last window: its own batch)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    group: list[np.ndarray] = []
    index = window = 0
    for w in wins:
        if group and (len(group) == batch_size or len(w) != len(group[0])):
            yield Batch(index, window, np.stack(group))
            index, window, group = index + 1, window + len(group), []
        group.append(w)
    if group:
        yield Batch(index, window, np.stack(group))


def check_conversations(corpus, chat) -> MessageIndex:
    """An empty index for ``corpus`` (a :class:`~model.atlas.corpus.Corpus`); refused before anything runs
    when it holds conversations and the model has no chat template ``chat``."""
    if chat is None and corpus.conversations:
        first = next(f for f in corpus.files if f.conversations)
        raise CorpusError(
            f"{first.path}: {first.conversations} conversations (JSONL 'messages'), and the model has no chat "
            "template to lay them out; use a chat model, or lines with 'text'"
        )
    return MessageIndex()
