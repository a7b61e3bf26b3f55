"""The models and oracles of the lens, knockout and patching tests: transformers itself, with hooks.

Five models: the GPT-2 export of a random GPT of ours (run by our own code), a Llama with grouped-query
attention, a Qwen3 (QK-norm), Gemma 2 (softcaps, post-norms, sliding windows) and gpt-oss (sinks,
sliding and full layers), the last four run through the transformers backend. Each oracle is the same
directory opened by transformers with eager attention:

* :func:`knocked_out`: an attention function registered for the oracle that wraps the family's own
  ``eager_attention_forward`` and sets the chosen cells of that layer's (and head's) mask to -inf;
* :func:`head_patched`: a forward pre-hook on ``o_proj`` / ``c_proj`` writing a head's slice of its input;
* :func:`residual_patched`: a forward hook on a decoder layer writing its output at one position.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.kit import family as familykit
from tests.kit.hooks import head_dim, out_projection

TEXT = "The cat sat on the mat. Then the cat saw the dog, and the dog sat on the log. The cat sat"
FAMILIES = ("gpt2-export", "llama", "qwen3", "gemma2", "gpt_oss")
ORACLE = "attnscope_knockout_oracle"


def build_model(name: str, root: Path) -> Path:
    """``name`` of :data:`FAMILIES` written under ``root``."""
    if name == "gpt2-export":
        from attnscope.model.ours.gpt import GPT, GPTConfig
        from attnscope.model.ours.gpt2_format import export_hf
        from attnscope.model.ours.tokenizer import BPETokenizer

        from tests.model.conftest import documents, randomize

        tokenizer = BPETokenizer.train(["\n".join(documents(40, 0))], vocab_size=300)
        torch.manual_seed(0)
        config = GPTConfig(block_size=48, vocab_size=tokenizer.vocab_size, n_layer=3, n_head=4, n_embd=32, name="kit")
        return export_hf(randomize(GPT(config), seed=1).eval(), tokenizer, root / name)
    configs = familykit.family_configs()
    configs["qwen3"] = familykit.decoder("qwen3", head_dim=16)  # QK-norm
    with mock.patch.object(familykit, "family_configs", lambda: configs):
        return familykit.build(name, root / name)


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    """The :data:`FAMILIES`' folders (tests/model/causal/conftest.py's ``loaded`` loads them)."""
    root = tmp_path_factory.mktemp("interventions")
    return {name: build_model(name, root) for name in FAMILIES}


@pytest.fixture(scope="module")
def oracles(family_dirs):
    """Each model of ``family_dirs`` in transformers' eager attention."""
    return {name: oracle_model(path) for name, path in family_dirs.items()}


@pytest.fixture(scope="module")
def knock_oracles(family_dirs):
    """Each model of ``family_dirs`` in the knocking-out attention (:func:`knocked_out`)."""
    register_oracle()
    return {name: oracle_model(path, ORACLE) for name, path in family_dirs.items()}


def oracle_model(path: Path, implementation: str = "eager"):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=implementation).eval()


def decoder_layers(model) -> torch.nn.ModuleList:
    return model.transformer.h if model.config.model_type == "gpt2" else model.model.layers


def final_norm(model) -> torch.nn.Module:
    return model.transformer.ln_f if model.config.model_type == "gpt2" else model.model.norm


def unembed(model, h: torch.Tensor) -> torch.Tensor:
    """The LM head and any final softcap (Gemma 2), as the model's forward applies them."""
    logits = model.lm_head(h)
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


# ------------------------------------------------------------------ knockout


_EDGES: list[tuple[int, int | None, int, int, int, int]] = []


def _knocking_attention(module, query, key, value, attention_mask, **kwargs):
    eager = sys.modules[type(module).__module__].eager_attention_forward  # the family's own eager attention
    layer = int(module.layer_idx)
    mine = [e for e in _EDGES if e[0] == layer]
    if mine:
        B, nh = query.shape[:2]
        mask = attention_mask.expand(B, nh, *attention_mask.shape[-2:]).clone()  # (B, nh, T, S) additive
        for _, head, q0, q1, k0, k1 in mine:
            mask[:, slice(None) if head is None else head, q0:q1, k0:k1] = float("-inf")
        attention_mask = mask
    return eager(module, query, key, value, attention_mask, **kwargs)


def register_oracle() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ORACLE, _knocking_attention)
    AttentionMaskInterface.register(ORACLE, eager_mask)


@contextlib.contextmanager
def knocked_out(edges):
    """Within this block, a model opened with ``attn_implementation=ORACLE`` knocks ``edges`` out."""
    _EDGES[:] = list(edges)
    try:
        yield
    finally:
        _EDGES.clear()


# ------------------------------------------------------------------ patching


def oracle_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]  # (T, V)


def head_inputs(model, ids: list[int]) -> dict[int, torch.Tensor]:
    """Per layer, what the output projection reads on this text ``(T, nh · hs)``."""
    seen = {}
    handles = [
        out_projection(model, layer).register_forward_pre_hook(
            lambda m, args, layer=layer: seen.__setitem__(layer, args[0][0].clone())
        )
        for layer in range(len(decoder_layers(model)))
    ]
    oracle_logits(model, ids)
    for handle in handles:
        handle.remove()
    return seen


@contextlib.contextmanager
def head_patched(model, layer: int, head: int, value: torch.Tensor):
    """Head (layer, head)'s slice of the output projection's input replaced by ``value`` ``(T, hs)``."""
    hs = head_dim(model)

    def pre_hook(module, args):
        x = args[0].clone()
        x[0, :, head * hs : (head + 1) * hs] = value
        return (x, *args[1:])

    handle = out_projection(model, layer).register_forward_pre_hook(pre_hook)
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def residual_patched(model, layer: int, position: int, value: torch.Tensor):
    """The output of decoder layer ``layer`` at ``position`` replaced by ``value`` ``(C,)``."""

    def hook(module, args, output):
        out = output[0] if isinstance(output, tuple) else output
        out = out.clone()
        out[0, position] = value
        return (out, *output[1:]) if isinstance(output, tuple) else out

    handle = decoder_layers(model)[layer].register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def layer_outputs(model, ids: list[int]) -> list[torch.Tensor]:
    """Each decoder layer's output on this text ``(T, C)``, by forward hooks."""
    seen = []
    hook = lambda m, a, o: seen.append((o[0] if isinstance(o, tuple) else o)[0].clone())  # noqa: E731
    handles = [layer.register_forward_hook(hook) for layer in decoder_layers(model)]
    oracle_logits(model, ids)
    for handle in handles:
        handle.remove()
    return seen
