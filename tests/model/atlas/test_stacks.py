"""The atlas of one stack of an encoder-decoder (model/atlas/stacks.py): each window its source and its
teacher-forced target, every metric of the encoder, decoder and cross stacks equal to a direct computation from
transformers eager's ``encoder_attentions``, ``decoder_attentions`` and ``cross_attentions`` on those windows;
the metadata names the stack and the target; a stack the model lacks is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from attnscope.model.atlas.build import AtlasError, atlas
from attnscope.model.atlas.corpus import open_corpus, token_stream, windows
from attnscope.model.atlas.metrics import METRICS
from attnscope.model.atlas.read import META_FILE, read_atlas
from attnscope.model.heads import induction_score, induction_tokens, probe_prefix, random_pool

pytest.importorskip("transformers")

from attnscope.model.registry import load_model  # noqa: E402
from transformers import AutoModelForSeq2SeqLM  # noqa: E402

from tests.kit.atlas import ENGLISH_DOCS, write_docs  # noqa: E402
from tests.kit.seq2seq import build_seq2seq  # noqa: E402

SEQ_LEN, BATCH, LOCAL = 16, 2, 4
EAGER = {"encoder": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}
FIRST_ROW = {"first_token": 2, "previous_token": 2, "local_fraction": LOCAL}  # the others: row 1


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    path = build_seq2seq("t5", tmp_path_factory.mktemp("atlas-t5") / "t5")
    return load_model(path, "cpu"), path


@pytest.fixture(scope="module")
def t5gemma2(tmp_path_factory):
    """T5Gemma 2: its decoder and cross stacks are the two blocks of one softmax (rows summing below 1)."""
    path = build_seq2seq("t5gemma2", tmp_path_factory.mktemp("atlas-t5g2") / "m")
    return load_model(path, "cpu"), path


def row_metrics(A: np.ndarray, name: str) -> np.ndarray:
    """One metric of one window's patterns ``A`` (L, nh, T, S) over rows t >= its first row -> (L, nh, R)."""
    T, S = A.shape[-2:]
    t = np.arange(T)
    back = t[:, None] - np.arange(S)[None, :]
    logs = np.log(np.where(A > 0, A, 1.0))
    every = {
        "first_token": A[..., 0],
        "sink_mass": 1.0 - A.sum(-1),
        "previous_token": A[:, :, t, np.maximum(t - 1, 0)],
        "self": A[:, :, t, t],
        "entropy": -(A * logs).sum(-1),
        "mean_distance": (A * back).sum(-1),
        "local_fraction": (A * ((back >= 0) & (back < LOCAL))).sum(-1),
    }
    return every[name][..., FIRST_ROW.get(name, 1) :]


@pytest.mark.parametrize("stack", ["encoder", "decoder", "cross"])
@pytest.mark.parametrize("family", ["t5", "t5gemma2"])
def test_each_stack_equals_eager_on_the_window_as_source_and_target(family, stack, request, tmp_path):
    lm, path = request.getfixturevalue(family)
    corpus = write_docs(tmp_path / "docs.txt", ENGLISH_DOCS[:3])
    out = atlas(corpus, tmp_path / "out", model=lm, seq_len=SEQ_LEN, batch_size=BATCH, local_window=LOCAL,
                exemplars=2, stack=stack)
    got = read_atlas(out)
    meta = json.loads((out / META_FILE).read_text())
    assert meta["model"]["stack"] == stack and meta["settings"]["stack"] == stack
    assert (meta["model"]["target"] is None) == (stack == "encoder")
    ref = AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="eager").eval()
    wins = list(windows(token_stream(open_corpus([corpus]).documents(), lm.tokenizer), SEQ_LEN))
    per_window = []
    for w in wins:
        ids = torch.from_numpy(w)[None]
        with torch.no_grad():
            res = ref(input_ids=ids, decoder_input_ids=ids, output_attentions=True)
        per_window.append(torch.stack(getattr(res, EAGER[stack]), dim=1)[0].double().numpy())  # (L, nh, T, T)
    assert got.layers == list(range(per_window[0].shape[0]))
    for m in METRICS:
        if m == "sink_mass":
            assert m not in got.metrics
            continue
        v = np.concatenate([row_metrics(A, m) for A in per_window], axis=-1)
        assert (got.counts[m] == v.shape[-1]).all(), m
        np.testing.assert_allclose(got.maps[m], v.mean(-1), rtol=0, atol=1e-5 * max(1.0, np.abs(v).max()), err_msg=m)
    # induction: on model.heads' probe, the probe both source and target
    facts, tok = lm.facts, lm.tokenizer
    n = min(40, (facts.block_size - 1) // 2)
    rand = induction_tokens(facts.vocab_size, n=n, pool=random_pool(tok, facts.vocab_size))
    start = probe_prefix(tok) or tok.encode_ids("")[:1]
    probe = torch.cat([torch.tensor(start, dtype=torch.long).expand(rand.size(0), len(start)), rand, rand], dim=1)
    with torch.no_grad():
        res = ref(input_ids=probe, decoder_input_ids=probe, output_attentions=True)
    expected = induction_score(torch.stack(getattr(res, EAGER[stack]), dim=1), len(start), n).mean(0).numpy()
    np.testing.assert_allclose(got.maps["induction"], expected, atol=1e-5)


def test_a_stack_the_model_lacks_is_one_line(t5, tmp_path):
    corpus = write_docs(tmp_path / "docs.txt", ENGLISH_DOCS[:2])
    shipped = load_model(None, "cpu")
    for lm, stack in ((shipped, "cross"), (shipped, "encoder")):
        with pytest.raises(AtlasError, match=f"no {stack} stack") as e:
            atlas(corpus, tmp_path / "out", model=lm, seq_len=SEQ_LEN, stack=stack)
        assert "\n" not in str(e.value) and "decoder" in str(e.value)
    assert not (tmp_path / "out").exists()
    # the default: the decoder, named in the metadata
    out = atlas(corpus, tmp_path / "t5", model=t5[0], seq_len=SEQ_LEN, batch_size=BATCH, exemplars=0)
    assert json.loads((out / META_FILE).read_text())["model"]["stack"] == "decoder"


def test_a_speech_model_is_refused_in_one_line(tmp_path):
    """Whisper's encoder hears a recording: a text corpus has no source for it."""
    from tests.kit.speech import build_whisper

    lm = load_model(build_whisper(tmp_path / "whisper"), "cpu")
    corpus = write_docs(tmp_path / "docs.txt", ENGLISH_DOCS[:2])
    for stack in (None, "encoder", "cross"):
        with pytest.raises(AtlasError, match="speech model") as e:
            atlas(corpus, tmp_path / "out", model=lm, seq_len=SEQ_LEN, stack=stack)
        assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_an_encoders_one_stack(tmp_path):
    """An encoder (a tiny BERT): its one stack, `encoder`, by default and by name; the decoder it lacks refused."""
    from transformers import AutoModelForMaskedLM

    from tests.kit.encoders import build_encoder

    path = build_encoder("bert", tmp_path / "bert")
    lm = load_model(path, "cpu")
    corpus = write_docs(tmp_path / "docs.txt", ENGLISH_DOCS[:2])
    ref = AutoModelForMaskedLM.from_pretrained(path, attn_implementation="eager").eval()
    per_window = []
    for w in windows(token_stream(open_corpus([corpus]).documents(), lm.tokenizer), SEQ_LEN):
        with torch.no_grad():
            res = ref(input_ids=torch.from_numpy(w)[None], output_attentions=True)
        per_window.append(torch.stack(res.attentions, dim=1)[0].double().numpy())
    for stack in (None, "encoder"):
        out = atlas(corpus, tmp_path / f"out-{stack}", model=lm, seq_len=SEQ_LEN, batch_size=BATCH, exemplars=0,
                    stack=stack)
        meta = json.loads((out / META_FILE).read_text())
        assert meta["model"]["stack"] == "encoder" and meta["model"]["target"] is None
        got = read_atlas(out)
        for m in ("entropy", "mean_distance", "self"):
            v = np.concatenate([row_metrics(A, m) for A in per_window], axis=-1)
            np.testing.assert_allclose(got.maps[m], v.mean(-1), rtol=0, atol=1e-5 * max(1.0, np.abs(v).max()))
    with pytest.raises(AtlasError, match="no decoder stack"):
        atlas(corpus, tmp_path / "bad", model=lm, seq_len=SEQ_LEN, stack="decoder")
