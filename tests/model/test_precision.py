"""fp32 serving is fp32: TF32 never leaks from training into what attnscope shows."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from attnscope.model.backends import OursBackend
from attnscope.model.ours.gpt import GPT, AttentionOptions, GPTConfig
from attnscope.model.ours.train import train
from attnscope.model.ours.train_config import PRESETS
from attnscope.model.precision import exact_fp32, tf32_for_training


@pytest.fixture
def tiny(corpus_dir, tmp_path):
    return replace(PRESETS["tiny"], corpus=str(corpus_dir), out=str(tmp_path / "run"))


class PrecisionSink(list):
    """A trace sink that also notes the matmul precision in force as each layer arrives."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def append(self, item):
        self.seen.append(torch.get_float32_matmul_precision())
        super().append(item)


@pytest.fixture
def reduced_precision():
    """A process that asked for TF32 (a notebook, a training run in the same process)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    yield
    torch.set_float32_matmul_precision(before)


def test_every_forward_pass_runs_in_full_fp32(reduced_precision, tokenizer):
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, n_layer=2, n_head=2, n_embd=32, block_size=32))
    backend = OursBackend(model, tokenizer, torch.device("cpu"))
    sink = PrecisionSink()
    backend.run(tokenizer.encode_ids("the cat sat"), AttentionOptions(), sink)
    backend.hidden(tokenizer.encode_ids("the cat sat"), AttentionOptions(), sink)
    assert sink.seen == ["highest"] * 4
    assert torch.get_float32_matmul_precision() == "high"  # the caller's setting is given back


def test_the_transformers_backend_runs_in_full_fp32(reduced_precision, tmp_path):
    pytest.importorskip("transformers")
    from attnscope.model.registry import load_model

    from tests.kit.family import build

    lm = load_model(build("llama", tmp_path / "llama"), "cpu")
    sink = PrecisionSink()
    lm.backend.run(lm.tokenizer.encode_ids("the cat sat"), AttentionOptions(), sink)
    assert sink.seen and set(sink.seen) == {"highest"}
    assert torch.get_float32_matmul_precision() == "high"


def test_training_turns_tf32_on_for_its_own_loop_only(tiny):
    assert torch.get_float32_matmul_precision() == "highest"
    train(replace(tiny, max_steps=2, eval_every=2))
    assert torch.get_float32_matmul_precision() == "highest"
    with tf32_for_training("cpu"):  # nothing to gain on the CPU: left alone
        assert torch.get_float32_matmul_precision() == "highest"
    with tf32_for_training("cuda"):
        assert torch.get_float32_matmul_precision() == "high"
        with exact_fp32():
            assert torch.get_float32_matmul_precision() == "highest"
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == "highest"


def test_a_failing_training_run_gives_the_setting_back(tiny):
    with pytest.raises(Exception), tf32_for_training("cuda"):  # noqa: B017, PT011 - any failure inside
        raise RuntimeError("out of memory")
    assert torch.get_float32_matmul_precision() == "highest"
