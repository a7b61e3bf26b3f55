"""Byte-level BPE tokenizer (Hugging Face ``tokenizers``), trained on our corpus.

Byte-level means every string, whatever its script or control characters, maps to tokens
and back exactly: the base alphabet is the 256 byte values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOT = "<|endoftext|>"  # document separator, also used as the beginning-of-text token


@dataclass(frozen=True)
class Encoding:
    ids: list[int]
    tokens: list[str]  # display strings: leading space as "␣", newline as "↵"
    offsets: list[tuple[int, int]]  # character spans into the input text


_VISIBLE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


def display_token(raw: bytes) -> str:
    """A readable label for one token's bytes.

    Whitespace is made visible; bytes that are only part of a UTF-8 character are shown as
    ``<0xE2>`` so a split emoji reads as its pieces instead of as replacement characters.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = "".join(chr(b) if 0x20 <= b < 0x7F else f"<0x{b:02X}>" for b in raw)
    out = []
    for ch in text.translate(_VISIBLE):
        out.append(ch if ch.isprintable() or ch in "␣↵⇥␍" else f"\\u{ord(ch):04x}")
    return "".join(out)


class BPETokenizer:
    """Thin wrapper over a ``tokenizers.Tokenizer`` adding display strings and offsets."""

    def __init__(self, tokenizer: Tokenizer):
        self.tk = tokenizer
        self.eot_id = tokenizer.token_to_id(EOT)
        # bytes of each token, via the byte-level decoder's mapping
        self._byte_decoder = {c: b for b, c in _bytes_to_unicode().items()}
        vocab = tokenizer.get_vocab()
        added = {t.content for t in tokenizer.get_added_tokens_decoder().values()}  # special tokens, stored as text
        self._bytes = [b""] * tokenizer.get_vocab_size()
        for tok, i in vocab.items():
            if tok == EOT or tok in added:
                self._bytes[i] = tok.encode()
            else:
                self._bytes[i] = bytes(self._byte_decoder[c] for c in tok)
        self._display = [display_token(b) for b in self._bytes]  # looked up, not rebuilt, per encode

    @property
    def vocab_size(self) -> int:
        return self.tk.get_vocab_size()

    def encode(self, text: str) -> Encoding:
        enc = self.tk.encode(text, add_special_tokens=False)
        ids = list(enc.ids)
        return Encoding(ids=ids, tokens=[self._display[i] for i in ids], offsets=_char_offsets(text, ids, self._bytes))

    def encode_ids(self, text: str) -> list[int]:
        return self.tk.encode(text, add_special_tokens=False).ids

    def encode_batch_ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tk.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return b"".join(self._bytes[i] for i in ids).decode("utf-8", errors="replace")

    def token_bytes(self, i: int) -> bytes:
        return self._bytes[i]

    def display(self, i: int) -> str:
        return self._display[i]

    def save(self, path: str | Path) -> None:
        self.tk.save(str(path))

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        return cls(Tokenizer.from_file(str(path)))

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 4096) -> BPETokenizer:
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[EOT],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tk.train_from_iterator(texts, trainer=trainer)
        return cls(tk)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by the byte-level pre-tokenizer
    (``tokenizers`` applies it internally but does not expose it)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _char_offsets(text: str, ids: list[int], token_bytes: list[bytes]) -> list[tuple[int, int]]:
    """Character span of each token. A token holding part of a multi-byte character covers
    that whole character, so neighbouring spans can share it; a token with no bytes gets the
    empty span at the end of the text."""
    n = len(text)
    ends = list(accumulate(len(token_bytes[i]) for i in ids))  # byte offset after each token
    starts = [0, *ends[:-1]]
    if text.isascii():  # one byte per character: byte offsets are character offsets
        return [(a, b) if b > a else (n, n) for a, b in zip(starts, ends)]
    # byte position -> index of the character containing it
    char_of_byte = [ci for ci, ch in enumerate(text) for _ in range(len(ch.encode("utf-8")))]
    return [(char_of_byte[a], char_of_byte[b - 1] + 1) if b > a else (n, n) for a, b in zip(starts, ends)]
