"""The byte-level BPE: any text round-trips, offsets are honest spans, labels are readable."""

from __future__ import annotations

import pytest
from attnscope.model.ours.tokenizer import EOT, BPETokenizer, display_token, tile_offsets
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

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


def assert_tiles(text: str, spans: list[tuple[int, int]]) -> None:
    """In order, never overlapping, and together the spans rebuild the text."""
    assert all(0 <= a <= b <= len(text) for a, b in spans)
    assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    if spans:
        assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert "".join(text[a:b] for a, b in spans) == text


def assert_follows_the_tokenizer(tk: Tokenizer, text: str, spans: list[tuple[int, int]]) -> None:
    """Each character is held by the last token whose own offset mapping (``tokenizers``) claims it."""
    raw = tk.encode(text, add_special_tokens=False).offsets
    assert len(raw) == len(spans)
    owner = {}
    for t, (a, b) in enumerate(raw):
        for c in range(a, b):
            owner[c] = t  # later tokens overwrite: the last claim wins
    for t, (a, b) in enumerate(spans):
        for c in range(a, b):
            assert owner.get(c, t) == t, (text, c, raw, spans)


@settings(max_examples=300, deadline=None)
@given(texts)
@example("")
@example("x👨‍👩‍👧y")
@example("\ufeff\ufeffhi")
@example("a £5 😀 x")
def test_offsets_tile_the_text_as_the_tokenizer_maps_it(tokenizer, s):
    enc = tokenizer.encode(s)
    assert len(enc.ids) == len(enc.tokens) == len(enc.offsets)
    assert_tiles(s, enc.offsets)
    assert_follows_the_tokenizer(tokenizer.tk, s, enc.offsets)
    for i, (a, b) in zip(enc.ids, enc.offsets):
        if b > a:  # the token's bytes end inside the characters it holds
            assert s[a:b].encode("utf-8").endswith(tokenizer.token_bytes(i)[-1:])


def test_a_character_split_into_bytes_is_covered_once_by_its_last_piece(tokenizer):
    enc = tokenizer.encode("\ufeff\ufeffhi")  # two byte-order marks: three byte tokens each
    assert enc.offsets[:6] == [(0, 0), (0, 0), (0, 1), (1, 1), (1, 1), (1, 2)]
    enc = tokenizer.encode("a £5")  # " " and the first byte of "£" may share a token
    assert_tiles("a £5", enc.offsets)
    assert sum(1 for a, b in enc.offsets if a <= 2 < b) == 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)).map(sorted).map(tuple), max_size=12),
    st.integers(0, 30),
)
def test_any_offset_mapping_becomes_a_tiling(raw, n):
    """Whatever a tokenizer reports (out of order, overlapping, past the end), the result tiles the text."""
    text = "x" * n
    spans = tile_offsets(raw, n)
    assert len(spans) == len(raw)
    if raw:
        assert_tiles(text, spans)


def sentencepiece_without_byte_fallback() -> Tokenizer:
    """A SentencePiece-style BPE whose vocabulary lacks "£", digits and emoji: they become ``<unk>``."""
    tk = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=False))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tk.train_from_iterator(["The cat sat on the mat. The dog ate the pie, and we went home."] * 20, trainer=trainer)
    return tk


SP_TEXTS = st.one_of(
    st.text(alphabet=st.sampled_from(list("The cat sat on mat.£😀0123 \ufeffé\n")), max_size=40),
    st.text(max_size=30),
)


@settings(max_examples=200, deadline=None)
@given(SP_TEXTS)
@example("It costs £87 for 3 cats 😀 and the dog.")
@example("\ufeffThe cat")
def test_unknown_characters_keep_honest_spans(s):
    tk = sentencepiece_without_byte_fallback()
    bpe = BPETokenizer(tk, bos_token="<s>")
    enc = bpe.encode(s)
    assert enc.ids[0] == tk.token_to_id("<s>") and enc.offsets[0] == (0, 0)  # the prefixed BOS
    assert_tiles(s, enc.offsets[1:])
    assert_follows_the_tokenizer(tk, s, enc.offsets[1:])
    unk = tk.token_to_id("<unk>")
    for i, (a, b) in zip(enc.ids[1:], enc.offsets[1:]):
        if i == unk:  # an <unk> covers the characters it stands for
            assert b > a and not any(ch in "Thecatsonm." for ch in s[a:b])


def test_after_an_unknown_character_tokens_still_point_at_their_words():
    tk = sentencepiece_without_byte_fallback()
    text = "It costs £87 for the cat."
    enc = BPETokenizer(tk).encode(text)
    words = {text[a:b].strip() for a, b in enc.offsets}
    assert "£" in words and "cat" in {w.strip(".") for w in words}
    cat = text.index("cat")
    assert any(a <= cat < b for a, b in enc.offsets[-3:])


def test_sentencepiece_with_byte_fallback_tiles_the_text():
    from tests.kit.family import sentencepiece_tokenizer

    tk = sentencepiece_tokenizer()
    bpe = BPETokenizer(tk, bos_token="<s>")
    for s in ["It costs £87 😀 for the cat.", "\ufeffThe cat", "  two  spaces\n", "漢字"]:
        enc = bpe.encode(s)
        assert enc.offsets[0] == (0, 0)
        assert_tiles(s, enc.offsets[1:])
        assert_follows_the_tokenizer(tk, s, enc.offsets[1:])


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


@pytest.mark.parametrize("spelt", ["[UNK]", "<the-mask>"])
def test_a_typed_mask_is_the_tokenizers_mask_token_with_offsets_into_the_typed_text(spelt):
    from tests.kit.encoders import BERT_SPECIALS, tokenizer

    tk = tokenizer("wordpiece", BERT_SPECIALS)
    tk.add_special_tokens([spelt])
    tok = BPETokenizer(tk, specials=True)
    tok.mask_token = spelt  # a mask token spelt unlike "[MASK]", shorter or longer
    text = "the cat [MASK] on the [MASK]."
    enc = tok.encode(text)
    assert enc.ids == tk.encode(text.replace("[MASK]", spelt)).ids  # the special tokens added as the tokenizer does
    assert enc.ids.count(tk.token_to_id(spelt)) == 2
    assert "".join(text[a:b] for a, b in enc.offsets) == text  # spans into the text as typed
    covered = [text[a:b].strip() for (a, b), i in zip(enc.offsets, enc.ids) if i == tk.token_to_id(spelt)]
    assert covered == ["[MASK]", "[MASK]"]
    assert tok.encode_ids(text) == enc.ids
