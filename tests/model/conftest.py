"""Shared fixtures for the model tests: generated English-like text, a tokenizer trained on
it, small random models and a corpus directory. Nothing here reads data/ or the system's
documentation, and no test depends on trained weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from attnscope.model.ours.corpus import DOC_SEPARATOR
from attnscope.model.ours.gpt import GPT, GPTConfig
from attnscope.model.ours.tokenizer import BPETokenizer

from tests.kit.textgen import english_like


def documents(n_docs: int, seed: int, per_doc: int = 8) -> list[str]:
    sentences = english_like(n_docs * per_doc, seed)
    return [" ".join(sentences[i * per_doc : (i + 1) * per_doc]) for i in range(n_docs)]


def write_corpus(root: Path, n_train_docs: int = 60, n_val_docs: int = 6) -> Path:
    """A corpus directory as :func:`model.ours.corpus.build` writes it (about 30 KB of training text)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, docs in (("train", documents(n_train_docs, 1)), ("val", documents(n_val_docs, 2))):
        (root / f"{name}.txt").write_text("".join(d + "\n" + DOC_SEPARATOR + "\n" for d in docs), encoding="utf-8")
    (root / "sentences_val.txt").write_text("\n".join(english_like(12, 3)) + "\n", encoding="utf-8")
    return root


def randomize(model: torch.nn.Module, seed: int, std: float = 0.2) -> torch.nn.Module:
    """Add noise to every parameter, LayerNorm gains and biases included, so that a wrong
    transpose or a swapped bias cannot hide behind GPT-2's all-zero bias initialisation."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(std * torch.randn(p.shape, generator=g))
    return model


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The models here are tiny, so a second thread buys nothing; on a busy machine (a
    training run next door) OpenMP threads waiting for each other make tests ~10× slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def text() -> str:
    return "\n".join(documents(40, 0))  # ~20 KB


@pytest.fixture(scope="session")
def tokenizer(text) -> BPETokenizer:
    return BPETokenizer.train([text], vocab_size=300)


@pytest.fixture(scope="session")
def tiny_config(tokenizer) -> GPTConfig:
    return GPTConfig(block_size=32, vocab_size=tokenizer.vocab_size, n_layer=2, n_head=4, n_embd=32, name="test")


@pytest.fixture
def make_model(tiny_config):
    """``make_model(seed=0, config=None)``: a seeded random model in eval mode, with
    non-trivial LayerNorms and biases."""

    def make(seed: int = 0, config: GPTConfig | None = None) -> GPT:
        torch.manual_seed(seed)
        return randomize(GPT(config or tiny_config), seed=seed + 1).eval()

    return make


@pytest.fixture
def model(make_model) -> GPT:
    return make_model()


@pytest.fixture
def corpus_dir(tmp_path) -> Path:
    return write_corpus(tmp_path / "corpus")


@pytest.fixture(scope="session")
def sentences():
    """``sentences(n, seed)``: generated English-like sentences."""
    return english_like
