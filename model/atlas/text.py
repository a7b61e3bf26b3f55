"""What an atlas exemplar shows: its context cut where the model's tokenizer reads it back as the
same tokens (:func:`cut_context`), and which rows have a context with anything to show
(:func:`shown_rows`).

A window's tokens are cut from a stream of bytes: a context taken at any token can begin or end
inside a character (a byte-level BPE splits accents, curly quotes, CJK and emoji into byte
pieces) or inside a word, which the tokenizer would then split another way, so that the query
lands on another token. A context is therefore cut on token *and* character boundaries, and
among those cuts the widest one whose re-encoding (the served model's ``encode``, its BOS
included) gives the context's own tokens up to and including the query is kept; the query's
character span is that encoding's span of it (an empty span for an earlier byte piece of a
character, as :func:`model.ours.tokenizer.tile_offsets` gives it). A SentencePiece tokenizer (``▁`` for
a space, which it puts before a text's first word itself) reads a context back as its own tokens
without the space its first token's ``▁`` stands for: that space is left out of the text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .metrics import CONTEXT_AFTER, CONTEXT_BEFORE

TRIES = 8  # re-encodings tried per exemplar for a cut that reads back as its own tokens


@dataclass(frozen=True)
class Cut:
    text: str
    first: int  # the index, in the context given, of ``text``'s first token
    query: int  # the index of the query in ``tokenizer.encode(text)`` (its BOS counted)
    query_start: int  # the query's characters in ``text``
    query_end: int


def token_text(tokenizer, ids, errors: str = "strict") -> str | None:
    """The tokens' bytes decoded as UTF-8; None where they do not begin and end on a character
    boundary (``errors="strict"``)."""
    if hasattr(tokenizer, "token_bytes"):
        raw = b"".join(tokenizer.token_bytes(int(i)) for i in ids)
        try:
            return raw.decode("utf-8", errors=errors)
        except UnicodeDecodeError:
            return None
    text = tokenizer.decode([int(i) for i in ids])
    if errors == "ignore":
        return text.replace("\ufffd", "")
    return None if "\ufffd" in text else text


def cut_context(tokenizer, ctx: list[int], q: int) -> Cut | None:
    """The widest cut of ``ctx`` (token ids around the query, ``ctx[q]``) that shows something and
    that ``tokenizer`` encodes back to ``ctx``'s tokens through the query, else the widest where
    the encoding has the query's token at the query's first character; None if there is neither
    (a context that is only spaces, or a window's edge inside the query's character).

    A model with a BOS: a context that begins with it leaves it out of the text (``encode`` puts it
    there)."""
    bos = getattr(tokenizer, "bos_id", None)
    head = [bos] if bos is not None else []
    loose, tries, seen = None, 0, set()
    for lo in range(q + 1):
        first = lo + 1 if bos is not None and ctx[lo] == bos and lo < q else lo
        if first in seen:
            continue
        seen.add(first)
        hi = next((h for h in range(len(ctx), q, -1) if token_text(tokenizer, ctx[first:h]) is not None), None)
        text = None if hi is None else token_text(tokenizer, ctx[first:hi])
        if text is None or not text.strip():
            continue
        i = len(head) + q - first
        # a SentencePiece tokenizer puts back the space of a first "▁word" itself: the text without it too
        for variant in (text, text[1:]) if text.startswith(" ") and text[1:].strip() else (text,):
            enc = tokenizer.encode(variant)
            tries += 1
            if enc.ids[: i + 1] == head + ctx[first : q + 1]:
                return Cut(variant, first, i, *enc.offsets[i])
        if loose is None:
            loose = _loose(tokenizer, tokenizer.encode(text), ctx[q], _size(tokenizer, ctx[q + 1 : hi]), first, text)
        if tries >= TRIES:
            break
    return loose


def _size(tokenizer, ids) -> int:
    return len(token_text(tokenizer, ids, errors="replace").encode()) if not hasattr(tokenizer, "token_bytes") \
        else sum(len(tokenizer.token_bytes(int(i))) for i in ids)


def _loose(tokenizer, enc, query: int, after: int, first: int, text: str) -> Cut | None:
    """The cut with the encoding's token ``query`` that has ``after`` bytes of the text after it
    (the end of a text is where its tokens are the context's, whatever a tokenizer put first)."""
    for i in range(len(enc.ids) - 1, -1, -1):
        if enc.ids[i] == query and _size(tokenizer, enc.ids[i + 1 :]) == after:
            return Cut(text, first, i, *enc.offsets[i])
    return None


def _shows(tokenizer, i: int) -> bool:
    """Whether token ``i`` holds a character that is not a space (a piece of a character: no)."""
    return bool(token_text(tokenizer, [i], errors="ignore").strip())


def shown_rows(tokenizer, ids: np.ndarray) -> np.ndarray:
    """(B, T) bool: the rows of the windows ``ids`` whose context (the :data:`CONTEXT_BEFORE` tokens
    before, the query, the :data:`CONTEXT_AFTER` after, inside the window) holds more than spaces."""
    uniq, inverse = np.unique(ids, return_inverse=True)
    shows = np.array([_shows(tokenizer, int(i)) for i in uniq], dtype=bool)[inverse.reshape(ids.shape)]
    B, T = ids.shape
    lo = np.clip(np.arange(T) - CONTEXT_BEFORE, 0, None)
    hi = np.clip(np.arange(T) + CONTEXT_AFTER + 1, None, T)
    running = np.concatenate([np.zeros((B, 1), dtype=np.int64), np.cumsum(shows, axis=1)], axis=1)
    shown = running[:, hi] - running[:, lo] > 0
    for b, t in zip(*np.nonzero(~shown)):  # spaces and pieces of characters only: their bytes read whole
        shown[b, t] = bool(token_text(tokenizer, ids[b, lo[t] : hi[t]], errors="ignore").strip())
    return shown
