"""Held-out metrics: loss in nats per token and bits per byte, for the model and a bigram.

Bits per byte divides the total negative log-likelihood (converted to bits) by the UTF-8
length of the text, so it compares models with different tokenizers.

Run ``python -m attnscope.model.ours.evaluate [CHECKPOINT]`` to print the figures the model card quotes.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from ..precision import exact_fp32
from .gpt import GPT

LN2 = math.log(2.0)
# 100 everyday sentences written by the attnscope authors, as people type them (capitals,
# punctuation, contractions, numbers); not from any corpus source, never trained on.
EVERYDAY = Path(__file__).resolve().parent / "evalsets" / "everyday.txt"


def read_sentences(path: Path) -> list[str]:
    return [s for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]


@torch.inference_mode()
@exact_fp32()
def sentence_nll(model: GPT, tokenizer, sentences: list[str], batch_size: int = 64) -> tuple[float, int, int]:
    """Total NLL (nats) of each sentence scored on its own after a ``<|endoftext|>``.

    Returns (nats, tokens, bytes)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    eot = tokenizer.eot_id
    T = model.config.block_size
    seqs = [([eot] + ids)[: T + 1] for ids in tokenizer.encode_batch_ids(sentences)]
    nats, ntok = 0.0, 0
    for i in range(0, len(seqs), batch_size):
        chunk = seqs[i : i + batch_size]
        L = max(len(s) for s in chunk)
        idx = torch.full((len(chunk), L - 1), eot, dtype=torch.long)
        tgt = torch.full((len(chunk), L - 1), -1, dtype=torch.long)
        for r, s in enumerate(chunk):
            idx[r, : len(s) - 1] = torch.tensor(s[:-1])
            tgt[r, : len(s) - 1] = torch.tensor(s[1:])
        logits, _ = model(idx.to(device))
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt.to(device).flatten(), ignore_index=-1, reduction="sum")
        nats += loss.item()
        ntok += int((tgt >= 0).sum())
    model.train(was_training)
    nbytes = sum(len(s.encode("utf-8")) for s in sentences)
    return nats, ntok, nbytes


@torch.inference_mode()
@exact_fp32()
def stream_loss(model: GPT, tokens: np.ndarray, n_windows: int = 64, batch_size: int = 16) -> float:
    """Mean NLL (nats/token) over ``n_windows`` evenly spaced full-context windows."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    T = model.config.block_size
    starts = np.linspace(0, len(tokens) - T - 2, n_windows).astype(np.int64)
    total, count = 0.0, 0
    for i in range(0, len(starts), batch_size):
        w = np.stack([tokens[s : s + T + 1] for s in starts[i : i + batch_size]]).astype(np.int64)
        w = torch.from_numpy(w).to(device)
        _, loss = model(w[:, :-1], w[:, 1:])
        total += loss.item() * w.size(0)
        count += w.size(0)
    model.train(was_training)
    return total / max(1, count)


class Bigram:
    """Add-k smoothed bigram over token ids: the baseline in the model card."""

    def __init__(self, vocab_size: int, k: float = 0.1):
        self.V = vocab_size
        self.k = k
        self.counts = np.zeros((vocab_size, vocab_size), dtype=np.float64)

    def fit(self, tokens: np.ndarray) -> Bigram:
        np.add.at(self.counts, (tokens[:-1].astype(np.int64), tokens[1:].astype(np.int64)), 1.0)
        return self

    def nll(self, tokens: np.ndarray) -> float:
        """Mean NLL in nats/token of ``tokens[1:]`` given the previous token."""
        a, b = tokens[:-1].astype(np.int64), tokens[1:].astype(np.int64)
        row = self.counts[a].sum(1) + self.k * self.V
        p = (self.counts[a, b] + self.k) / row
        return float(-np.log(p).mean())

    def sentence_nll(self, tokenizer, sentences: list[str]) -> tuple[float, int, int]:
        nats, ntok = 0.0, 0
        for ids in tokenizer.encode_batch_ids(sentences):
            seq = np.array([tokenizer.eot_id] + ids)
            nats += self.nll(seq) * (len(seq) - 1)
            ntok += len(seq) - 1
        return nats, ntok, sum(len(s.encode("utf-8")) for s in sentences)


def bits_per_byte(nats: float, nbytes: int) -> float:
    return nats / LN2 / max(1, nbytes)


def main(argv: list[str] | None = None) -> None:
    from ..registry import load_model
    from .corpus import read_documents

    ap = argparse.ArgumentParser(description="Held-out loss of a checkpoint and of a bigram baseline")
    ap.add_argument("checkpoint", nargs="?", default=None)
    ap.add_argument("--corpus", type=Path, default=Path("data/corpus"))
    ap.add_argument("--everyday", type=Path, default=EVERYDAY, help="a second sentence set, one per line")
    args = ap.parse_args(argv)
    missing = [f for f in ("train.txt", "val.txt", "sentences_val.txt") if not (args.corpus / f).is_file()]
    if missing:
        raise SystemExit(
            f"evaluate: no corpus at {args.corpus} ({', '.join(missing)} missing); build it with "
            f"`python -m attnscope.model.ours.corpus --out {args.corpus}` or pass --corpus DIR"
        )
    lm = load_model(args.checkpoint)
    tok = lm.tokenizer

    def stream(split: str) -> tuple[np.ndarray, int]:
        docs = read_documents(args.corpus / f"{split}.txt")
        ids: list[int] = []
        for d in tok.encode_batch_ids(docs):
            ids.extend(d + [tok.eot_id])
        return np.array(ids, dtype=np.int64), sum(len(d.encode()) + 1 for d in docs)

    train, _ = stream("train")
    val, val_bytes = stream("val")
    sentences = read_sentences(args.corpus / "sentences_val.txt")
    bigram = Bigram(tok.vocab_size).fit(train)

    model_val = stream_loss(lm.model, val, n_windows=min(512, max(1, len(val) // lm.config.block_size)))
    bigram_val = bigram.nll(val)
    bytes_per_token = val_bytes / len(val)

    def sentence_report(sents: list[str]) -> dict:
        m_nats, m_tok, m_bytes = sentence_nll(lm.model, tok, sents)
        b_nats, b_tok, _ = bigram.sentence_nll(tok, sents)
        return {
            "sentences": len(sents),
            "model_nats_per_token": round(m_nats / m_tok, 4),
            "model_bits_per_byte": round(bits_per_byte(m_nats, m_bytes), 4),
            "bigram_nats_per_token": round(b_nats / b_tok, 4),
            "bigram_bits_per_byte": round(bits_per_byte(b_nats, m_bytes), 4),
        }

    report = {
        "heldout_split": {
            "tokens": int(len(val)),
            "model_nats_per_token": round(model_val, 4),
            "model_bits_per_byte": round(model_val / LN2 / bytes_per_token, 4),
            "bigram_nats_per_token": round(bigram_val, 4),
            "bigram_bits_per_byte": round(bigram_val / LN2 / bytes_per_token, 4),
        },
        "heldout_sentences": sentence_report(sentences),
        "everyday_sentences": sentence_report(read_sentences(args.everyday)),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
