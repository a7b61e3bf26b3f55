"""The backend interface: both families have every member the rest of attnscope calls, and the
facts say each layer's divisor and how the model defines it."""

from __future__ import annotations

import math

import pytest
import torch
from attnscope.model.backends import Backend, ModelFacts, OursBackend, ResumableBackend
from attnscope.model.inspection import inspect
from attnscope.model.ours.checkpoint import SHIPPED
from attnscope.model.ours.gpt import GPT, GPTConfig
from attnscope.model.registry import load_model

TEXT = "The cat sat on the mat."


def facts(divisors: list[float], rules: list[str]) -> ModelFacts:
    n = len(divisors)
    return ModelFacts(
        name="m",
        family="f",
        n_layer=n,
        n_head=2,
        n_kv_head=2,
        head_dim=16,
        d_model=32,
        layer_divisors=divisors,
        layer_divisor_rules=rules,
        block_size=64,
        vocab_size=100,
        positions="learned",
        parameters=1,
        dtype="float32",
        device="cpu",
        sliding_window=[None] * n,
    )


def test_our_backend_is_a_resumable_backend():
    lm = load_model(SHIPPED, "cpu")
    assert isinstance(lm.backend, OursBackend)
    assert isinstance(lm.backend, Backend) and isinstance(lm.backend, ResumableBackend)


def test_the_transformers_backend_is_a_backend(tmp_path):
    pytest.importorskip("transformers")
    from tests.kit.family import build

    lm = load_model(build("llama", tmp_path / "llama"), "cpu")
    assert type(lm.backend).__name__ == "TransformersBackend"
    assert isinstance(lm.backend, Backend)
    assert not isinstance(lm.backend, ResumableBackend)  # head effects run whole passes for it


def test_a_backend_lacking_a_member_is_not_one():
    lm = load_model(SHIPPED, "cpu")

    class NoStep:  # every member but step
        facts, tokenizer, model, device = lm.facts, lm.tokenizer, lm.model, lm.device
        run, hidden, head, patterns = lm.backend.run, lm.backend.hidden, lm.backend.head, lm.backend.patterns
        last_logits, start_generation = lm.backend.last_logits, lm.backend.start_generation

    assert not isinstance(NoStep(), Backend)


def test_our_gpt_divides_every_layer_by_sqrt_head_dim():
    cfg = GPTConfig(n_layer=3, n_head=2, n_embd=32, vocab_size=64, block_size=16)
    backend = OursBackend(GPT(cfg), tokenizer=None, device=torch.device("cpu"))
    f = backend.facts
    assert f.layer_divisor_rules == ["sqrt(head_dim)"] * 3
    assert f.layer_divisors == [math.sqrt(cfg.head_dim)] * 3 == [4.0] * 3
    assert (f.divisor, f.divisor_rule) == (4.0, "sqrt(head_dim)")


def test_the_shipped_models_divisors_are_what_its_layers_apply():
    lm = load_model(SHIPPED, "cpu")
    assert inspect(lm.backend, None, TEXT).layer_divisors == lm.facts.layer_divisors


def test_the_models_divisor_and_rule_come_from_the_first_layer():
    same = facts([8.0, 8.0], ["sqrt(query_pre_attn_scalar)"] * 2)
    assert (same.divisor, same.divisor_rule) == (8.0, "sqrt(query_pre_attn_scalar)")
    differ = facts([4.0, 8.0], ["sqrt(head_dim)", "sqrt(head_dim) * (layer + 1)"])
    assert (differ.divisor, differ.divisor_rule) == (4.0, "per layer: sqrt(head_dim)")


def test_the_api_model_object_keeps_its_fields():
    d = facts([4.0, 4.0], ["sqrt(head_dim)"] * 2).to_dict()
    assert list(d)[:9] == [
        "name",
        "family",
        "n_layer",
        "n_head",
        "n_kv_head",
        "head_dim",
        "d_model",
        "divisor",
        "divisor_rule",
    ]
    assert "layer_divisors" not in d and "layer_divisor_rules" not in d  # each answer's layers carry their own
    assert d["kv_head_of"] == [0, 1]
