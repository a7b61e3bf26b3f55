"""Tokenizers as attnscope shows them: ids, display strings and character offsets.

Our own model uses a byte-level BPE (Hugging Face ``tokenizers``) trained on our corpus:
byte-level means every string, whatever its script or control characters, maps to tokens
and back exactly, the base alphabet being the 256 byte values. Other models bring their own
``tokenizer.json``; two spellings of a token's bytes are understood:

* byte-level (GPT-2, GPT-NeoX, Llama 3, Qwen2, SmolLM2): each byte is one printable character;
* SentencePiece style (Llama 2, TinyLlama, Mistral, Gemma): ``▁`` is a space and byte
  fallback tokens are written ``<0x0A>``.

Either way the display string comes from the token's bytes. Offsets come from the tokenizer's
own offset mapping (``tokenizers`` ``Encoding.offsets``), which knows what each token stands for
(an ``<unk>`` covers the characters it replaced), made into spans that tile the text: in order,
never overlapping, and together they rebuild it (:func:`tile_offsets`). Models whose tokenizer
adds a beginning-of-sequence token (``<s>``, ``<|begin_of_text|>``) get it here too, with an
empty span at 0: they were trained with it and attend to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOT = "<|endoftext|>"  # document separator, also used as the beginning-of-text token
TYPED_MASK = "[MASK]"  # what a person types for an encoder's mask token, whatever the tokenizer spells it


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


_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
METASPACE = "▁"


def _uses_byte_level(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer spells bytes GPT-2's way (a ByteLevel pre-tokenizer or decoder)."""
    spec = json.loads(tokenizer.to_str())
    return "ByteLevel" in json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])


class BPETokenizer:
    """Wrapper over a ``tokenizers.Tokenizer`` adding display strings, offsets and BOS handling.

    ``add_bos``: prefix the tokenizer's beginning-of-sequence token (``bos_id``) to every
    encoding, as the model saw in training. Our own model has none (``bos_id`` is ``None``).
    """

    def __init__(self, tokenizer: Tokenizer, bos_token: str | None = None, specials: bool = False):
        self.tk = tokenizer
        # an encoder's tokenizer adds its own special tokens ([CLS] ... [SEP], <s> ... </s>), as transformers does
        self.specials = specials
        self.mask_token: str | None = None  # an encoder's mask token: "[MASK]" typed in a text becomes it
        self.eot_id = tokenizer.token_to_id(EOT)
        self.bos_id = tokenizer.token_to_id(bos_token) if bos_token else None
        self.byte_level = _uses_byte_level(tokenizer)
        vocab = tokenizer.get_vocab()
        added = {t.content for t in tokenizer.get_added_tokens_decoder().values()}  # special tokens, stored as text
        self.special_ids = {vocab[t] for t in added if t in vocab}
        self._bytes = [b""] * tokenizer.get_vocab_size()
        byte_decoder = {c: b for b, c in _bytes_to_unicode().items()}
        for tok, i in vocab.items():
            if not self.byte_level and _BYTE_TOKEN.fullmatch(tok):  # byte fallback, even when stored as added
                self._bytes[i] = _sentencepiece_bytes(tok)
                self.special_ids.discard(i)
            elif tok == EOT or tok in added:
                self._bytes[i] = tok.encode()
            elif self.byte_level:
                self._bytes[i] = bytes(byte_decoder[c] for c in tok if c in byte_decoder)
            else:
                self._bytes[i] = _sentencepiece_bytes(tok)
        self._display = [display_token(b) for b in self._bytes]  # looked up, not rebuilt, per encode

    @property
    def vocab_size(self) -> int:
        return self.tk.get_vocab_size()

    def _ids(self, text: str) -> list[int]:
        ids = self.tk.encode(self._typed(text)[0], add_special_tokens=self.specials).ids
        return [self.bos_id, *ids] if self.bos_id is not None else list(ids)

    def _typed(self, text: str) -> tuple[str, list[tuple[int, int]]]:
        """``text`` with each ``[MASK]`` typed in it spelt as the mask token, and where each replacement
        starts, ``(position in the new text, characters added before the next)``; unchanged without one."""
        mask = self.mask_token
        if not mask or mask == TYPED_MASK or TYPED_MASK not in text:
            return text, []
        parts, shifts, grown = text.split(TYPED_MASK), [], 0
        for i in range(1, len(parts)):
            at = sum(len(p) for p in parts[:i]) + (i - 1) * len(mask) + len(mask)
            grown += len(mask) - len(TYPED_MASK)
            shifts.append((at, grown))
        return mask.join(parts), shifts

    def encode(self, text: str) -> Encoding:
        typed, shifts = self._typed(text)
        enc = self.tk.encode(typed, add_special_tokens=self.specials)
        ids, offsets = list(enc.ids), tile_offsets(_back(enc.offsets, shifts), len(text))
        if self.bos_id is not None:  # the prefixed BOS is not in the text
            ids, offsets = [self.bos_id, *ids], [(0, 0), *offsets]
        return Encoding(ids=ids, tokens=[self._display[i] for i in ids], offsets=offsets)

    def encode_ids(self, text: str) -> list[int]:
        return self._ids(text)

    def encode_batch_ids(self, texts: list[str]) -> list[list[int]]:
        return [self._ids(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return b"".join(self._bytes[i] for i in ids).decode("utf-8", errors="replace")

    def token_bytes(self, i: int) -> bytes:
        return self._bytes[i]

    def display(self, i: int) -> str:
        return self._display[i]

    def save(self, path: str | Path) -> None:
        self.tk.save(str(path))

    @classmethod
    def load(cls, path: str | Path, bos_token: str | None = None, specials: bool = False) -> BPETokenizer:
        return cls(Tokenizer.from_file(str(path)), bos_token=bos_token, specials=specials)

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


def _back(offsets: Iterable[tuple[int, int]], shifts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Offsets into a text whose typed masks were respelt (:meth:`BPETokenizer._typed`) -> into the text typed."""
    if not shifts:
        return list(offsets)

    def at(i: int) -> int:
        grown = 0
        for start, total in shifts:
            if i >= start:
                grown = total
        return max(0, i - grown)

    return [(at(a), at(b)) for a, b in offsets]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by the byte-level pre-tokenizer
    (``tokenizers`` applies it internally but does not expose it)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _sentencepiece_bytes(token: str) -> bytes:
    """``▁the`` -> b" the"; a byte-fallback token ``<0x0A>`` -> b"\\n"."""
    m = _BYTE_TOKEN.fullmatch(token)
    if m:
        return bytes([int(m.group(1), 16)])
    return token.replace(METASPACE, " ").encode("utf-8")


def tile_offsets(offsets: Iterable[tuple[int, int]], n_chars: int) -> list[tuple[int, int]]:
    """The tokenizer's character spans made into a tiling of a text of ``n_chars`` characters.

    A tokenizer gives every byte piece of a split character the whole character (an emoji in
    four byte tokens: four times the same span) and may let a token reach into the next one's
    character (a space followed by half of ``£``). Here each character belongs to the *last*
    token that claims it, earlier pieces keeping what is left (possibly an empty span where the
    character starts); characters no token claims (dropped by a normaliser) go to the next token
    that has any, or at the end to the last one. The result is in order, never overlaps, and
    ``"".join(text[a:b] for a, b in spans) == text``.
    """
    spans = [[a, b] for a, b in offsets]
    nxt = n_chars
    for sp in reversed(spans):  # a character goes to the last token holding it
        sp[1] = max(0, min(sp[1], nxt))
        sp[0] = min(sp[0], sp[1])
        if sp[1] > sp[0]:
            nxt = sp[0]
    prev = 0
    for sp in spans:  # in order; a gap before a token is the token's
        if sp[1] > sp[0]:
            sp[0], sp[1] = prev, max(sp[1], prev)
        else:
            sp[0] = sp[1] = prev
        prev = sp[1]
    if prev < n_chars:  # characters after the last token's: its
        last = max((i for i, sp in enumerate(spans) if sp[1] > sp[0]), default=len(spans) - 1)
        if last >= 0:
            for sp in spans[last:]:
                sp[1] = n_chars
            for sp in spans[last + 1 :]:
                sp[0] = n_chars
    return [(a, b) for a, b in spans]
