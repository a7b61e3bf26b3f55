"""Held-out metrics agree with a direct computation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from attnscope.model.ours.checkpoint import save_checkpoint
from attnscope.model.ours.evaluate import (
    EVERYDAY,
    Bigram,
    bits_per_byte,
    main,
    read_sentences,
    sentence_nll,
    stream_loss,
)
from attnscope.model.ours.gpt import GPT
from torch.nn import functional as F


def test_sentence_nll_equals_one_sentence_at_a_time(model, tokenizer, sentences):
    batch = sentences(6, 21)
    nats, ntok, nbytes = sentence_nll(model, tokenizer, batch, batch_size=4)
    expected, count = 0.0, 0
    for s in batch:
        ids = [tokenizer.eot_id] + tokenizer.encode_ids(s)
        with torch.no_grad():
            logits, _ = model(torch.tensor([ids[:-1]]))
        expected += F.cross_entropy(logits[0], torch.tensor(ids[1:]), reduction="sum").item()
        count += len(ids) - 1
    assert ntok == count
    assert nbytes == sum(len(s.encode()) for s in batch)
    assert nats == pytest.approx(expected, rel=1e-5)


def test_stream_loss_of_an_untrained_model_is_near_log_vocab(tiny_config):
    torch.manual_seed(0)
    model = GPT(tiny_config)
    tokens = np.random.default_rng(0).integers(0, tiny_config.vocab_size, size=2000)
    assert stream_loss(model, tokens, n_windows=8) == pytest.approx(math.log(tiny_config.vocab_size), abs=0.05)
    assert model.training  # mode restored


def test_bigram_on_a_deterministic_sequence():
    tokens = np.array([0, 1, 2] * 50)
    bigram = Bigram(vocab_size=3, k=0.1).fit(tokens)
    # after 0 always 1: (count + k) / (count + 3k)
    n01 = 50
    expected = -math.log((n01 + 0.1) / (n01 + 0.3))
    assert bigram.nll(np.array([0, 1])) == pytest.approx(expected)
    # an unseen transition is much less likely than a seen one
    assert bigram.nll(np.array([0, 2])) > 5 * bigram.nll(np.array([0, 1]))


def test_bits_per_byte():
    assert bits_per_byte(math.log(2) * 80, 10) == pytest.approx(8.0)
    assert bits_per_byte(0.0, 0) == 0.0


def test_the_everyday_set_is_typed_sentences():
    sentences = read_sentences(EVERYDAY)
    assert len(sentences) == 100 and len(set(sentences)) == 100
    for s in sentences:
        assert s[0].isupper() and s[-1] in ".?!", s


def test_main_reports_model_and_bigram_on_every_set(model, tokenizer, corpus_dir, tmp_path, capsys):
    save_checkpoint(model, tokenizer, tmp_path / "ckpt", {})
    main([str(tmp_path / "ckpt"), "--corpus", str(corpus_dir)])
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"heldout_split", "heldout_sentences", "everyday_sentences"}
    assert report["everyday_sentences"]["sentences"] == 100
    for part in report.values():
        assert all(math.isfinite(v) and v > 0 for v in part.values())
    # on text like its training split, the fitted bigram beats an untrained model
    split = report["heldout_split"]
    assert split["model_nats_per_token"] > split["bigram_nats_per_token"]


def test_main_without_a_corpus_says_so_in_one_line(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["--corpus", str(tmp_path / "nowhere")])
    message = str(exit_info.value)
    assert len(message.splitlines()) == 1
    assert "no corpus" in message and "attnscope.model.ours.corpus" in message
