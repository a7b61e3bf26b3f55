"""Transformers models with heads switched off by hooks: the oracle of the ablation, head-effect
and generation tests (model and service alike).

A head (l, h) is switched off the way an interpretability notebook would: a forward pre-hook on
the layer's output projection (GPT-2's ``c_proj``, Llama's ``o_proj``) that zeroes that head's
slice of its input. Three models (``CASES`` names the first two, which every test runs over; the
hybrid has tests of its own): the GPT-2 export of a random GPT of ours (run by our own code)
and a Llama-style grouped-query model (run through the transformers backend).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from attnscope.model.ours.gpt2_format import export_hf
from transformers import AutoModelForCausalLM

from tests.kit.family import build

TEXT = "The cat sat on the mat. Then the cat saw the dog, and the dog sat on the log. The cat sat"


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """name -> a transformers directory: our GPT exported as GPT-2, and a tiny Llama (GQA)."""
    from attnscope.model.ours.gpt import GPT, GPTConfig
    from attnscope.model.ours.tokenizer import BPETokenizer

    from tests.model.conftest import documents, randomize

    root = tmp_path_factory.mktemp("ablation")
    tokenizer = BPETokenizer.train(["\n".join(documents(40, 0))], vocab_size=300)
    torch.manual_seed(0)
    config = GPTConfig(block_size=48, vocab_size=tokenizer.vocab_size, n_layer=3, n_head=4, n_embd=32, name="abl")
    gpt = randomize(GPT(config), seed=1).eval()
    return {
        "gpt2-export": export_hf(gpt, tokenizer, root / "gpt2"),
        "llama": build("llama", root / "llama"),
        "lfm2": build("lfm2", root / "lfm2"),  # a hybrid: softmax attention in layers 1 and 3 only
    }


def out_projection(model, layer: int) -> torch.nn.Module:
    if model.config.model_type == "gpt2":
        return model.transformer.h[layer].attn.c_proj
    if model.config.model_type == "lfm2":
        return model.model.layers[layer].self_attn.out_proj
    return model.model.layers[layer].self_attn.o_proj


def head_dim(model) -> int:
    cfg = model.config
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


@contextlib.contextmanager
def hooked(model, heads, means=None):
    """Zero (or set to ``means[layer][head]``) each head's slice of the output projection's input."""
    hs = head_dim(model)
    handles = []
    for layer in sorted({lay for lay, _ in heads}):
        mine = [h for lay, h in heads if lay == layer]

        def pre_hook(module, args, layer=layer, mine=mine):
            x = args[0].clone()
            for h in mine:
                x[..., h * hs : (h + 1) * hs] = 0.0 if means is None else means[layer][h]
            return (x, *args[1:])

        handles.append(out_projection(model, layer).register_forward_pre_hook(pre_hook))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


CASES = {"gpt2-export": [(0, 1), (1, 3)], "llama": [(0, 0), (0, 1), (1, 4)]}  # llama heads 0, 1 share a kv head

PROMPT = "The cat sat on the mat. Then the dog"


def hf_greedy(path, ids, n, heads=()):
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    with torch.no_grad(), hooked(model, heads):
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
    generated = out[0, len(ids) :].tolist()
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    for i, t in enumerate(generated):  # after EOS, transformers pads
        if t in eos:
            return generated[: i + 1]
    return generated


def ours_on_cpu_and_gpu() -> tuple:
    """One small random GPT of ours twice, run by our own code on the CPU and on the GPU: (cpu, gpu) backends,
    the tests' way to hold the GPU's whole passes against the CPU's rows that start at their own block."""
    import copy

    from attnscope.model.backends import OursBackend
    from attnscope.model.ours.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=64, vocab_size=97, n_layer=3, n_head=4, n_embd=64)).eval()
    cpu = OursBackend(model, None, torch.device("cpu"))
    return cpu, OursBackend(copy.deepcopy(model).cuda(), None, torch.device("cuda"))
