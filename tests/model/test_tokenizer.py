"""The byte-level BPE: any text round-trips, offsets are honest spans, labels are readable."""

from __future__ import annotations

from attnscope.model.tokenizer import EOT, BPETokenizer, display_token
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

# characters a web form will eventually receive: emoji (incl. ZWJ sequences and skin tones),
# CJK, right-to-left scripts, combining marks, control characters, odd whitespace
AWKWARD = list(
    "😀👍🏽👨‍👩‍👧🇫🇷漢字かなカナ한국어שלוםمرحبا\u200f\u200e\u0301\u0308e\u0327"
    "\x00\x01\x07\x1b\x7f\t\r\n\u2028\u00a0\u3000\ufeff\ufffd"
    "ÅÉøß€£¥"
)
texts = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from(AWKWARD + list("ab c.\n")), max_size=60),
    st.lists(st.sampled_from(["the", " cat", " sat", "😀", "漢", "\n", "  ", EOT, "é"]), max_size=20).map("".join),
)


@settings(max_examples=300, deadline=None)
@given(texts)
@example("")
@example(" the cat\n\n\t😀 e\u0301 שלום 漢字 \x00")
def test_decode_encode_is_identity(tokenizer, s):
    assert tokenizer.decode(tokenizer.encode_ids(s)) == s


@settings(max_examples=300, deadline=None)
@given(texts)
@example("")
@example("x👨‍👩‍👧y")
def test_offsets_are_ordered_spans_covering_the_text(tokenizer, s):
    enc = tokenizer.encode(s)
    assert len(enc.ids) == len(enc.tokens) == len(enc.offsets)
    if not s:
        assert enc.ids == []
        return
    covered = [False] * len(s)
    prev_start, prev_end = 0, 0
    for i, (start, end) in zip(enc.ids, enc.offsets):
        assert 0 <= start < end <= len(s)
        # in order; a token may share its first character with the previous token only when
        # both hold bytes of that one multi-byte character
        assert start >= prev_start and end >= prev_end
        assert start in (prev_end, prev_end - 1)
        # the token's bytes are found inside the characters it claims
        assert tokenizer.token_bytes(i) in s[start:end].encode("utf-8")
        for c in range(start, end):
            covered[c] = True
        prev_start, prev_end = start, end
    assert enc.offsets[0][0] == 0 and enc.offsets[-1][1] == len(s)
    assert all(covered)


def test_encode_variants_agree(tokenizer, sentences):
    batch = sentences(5, 7)
    assert tokenizer.encode_batch_ids(batch) == [tokenizer.encode_ids(t) for t in batch]
    assert all(tokenizer.encode(t).ids == tokenizer.encode_ids(t) for t in batch)


def test_display_strings(tokenizer):
    enc = tokenizer.encode("The cat sat\nby the door")
    assert enc.tokens[0].startswith("T")
    # byte-level BPE keeps a word's leading space in the word's first token
    starts = [s for (s, _), t in zip(enc.offsets, enc.tokens) if t.startswith("␣")]
    assert starts == [3, 7, 14, 18]
    assert "".join(enc.tokens) == "The␣cat␣sat↵by␣the␣door"
    assert display_token(b" a\n\t\r") == "␣a↵⇥␍"
    assert display_token("😀".encode()[:2]) == "<0xF0><0x9F>"
    assert display_token(b"\x00") == "\\u0000"
    assert tokenizer.display(tokenizer.eot_id) == EOT


def test_endoftext_is_one_token(tokenizer):
    ids = tokenizer.encode_ids(f"one{EOT}two")
    assert tokenizer.eot_id in ids
    assert ids.count(tokenizer.eot_id) == 1
    assert tokenizer.decode(ids) == f"one{EOT}two"


def test_token_bytes_are_consistent_with_the_vocabulary(tokenizer):
    assert tokenizer.vocab_size == 300
    # the 256 byte values are all in the vocabulary, each as a one-byte token
    single = {tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size) if len(tokenizer.token_bytes(i)) == 1}
    assert single == {bytes([b]) for b in range(256)}
    assert tokenizer.token_bytes(tokenizer.eot_id) == EOT.encode()
    # a text's tokens are its UTF-8 bytes, cut into pieces
    s = "Ça marche 😀 漢字"
    assert b"".join(tokenizer.token_bytes(i) for i in tokenizer.encode_ids(s)) == s.encode("utf-8")


def test_save_and_load_give_the_same_tokenizer(tokenizer, tmp_path, sentences):
    tokenizer.save(tmp_path / "tokenizer.json")
    loaded = BPETokenizer.load(tmp_path / "tokenizer.json")
    assert loaded.vocab_size == tokenizer.vocab_size and loaded.eot_id == tokenizer.eot_id
    for s in sentences(10, 11) + ["漢字 😀"]:
        assert loaded.encode(s) == tokenizer.encode(s)


def test_added_special_tokens_are_shown_as_text(tokenizer):
    tk = Tokenizer.from_str(tokenizer.tk.to_str())
    tk.add_special_tokens(["<pad>"])
    with_pad = BPETokenizer(tk)
    pad = tk.token_to_id("<pad>")
    assert with_pad.token_bytes(pad) == b"<pad>" and with_pad.display(pad) == "<pad>"
    assert with_pad.decode(with_pad.encode_ids("a<pad>b")) == "a<pad>b"
