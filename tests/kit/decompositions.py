"""The models and the hooked-transformers oracle of the decomposition tests (attribution, QK).

Models: our GPT exported as GPT-2 (run by our own code, and by the transformers backend on the
same directory), and tiny random transformers of the families the split covers: a Llama with GQA,
Qwen2 (q, k, v biases), Mistral (sliding window), Qwen3 (QK-norm), Gemma 2 (post-norms, both
softcaps) and gpt-oss (sinks, MoE). The oracle runs
each in transformers' eager attention with hooks: the output projections' inputs, the final
norm's input, every layer's q and k (after RoPE) and the inputs of the q/k norms.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from attnscope.model.ours.checkpoint import SHIPPED
from transformers import AutoConfig, AutoModelForCausalLM

from tests.kit.family import QK_GAIN, QK_NORM_GAIN, build, decoder

TEXT = "The cat sat on the mat. Then the cat saw the dog, and the dog sat on the log. The cat sat"
FAMILIES = ["llama", "qwen2", "mistral", "qwen3", "gemma2", "gpt_oss"]


def build_qwen3(out: Path, seed: int = 0) -> Path:
    """A tiny Qwen3 (q and k normed per head, GQA), written as familykit writes the others."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_bytes((SHIPPED / "tokenizer.json").read_bytes())
    tc = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}
    (out / "tokenizer_config.json").write_text(json.dumps(tc))
    kwargs = decoder("qwen3", head_dim=16)
    config = AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(QK_GAIN)
            if name.endswith(("q_norm.weight", "k_norm.weight", "layernorm.weight", "norm.weight")):
                p.add_(0.3 * torch.randn(p.shape))  # gains away from 1, so a norm left out shows
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                p.add_(QK_NORM_GAIN - 1.0)
    model.save_pretrained(out)
    return out


def model_dirs(root: Path) -> dict[str, Path]:
    """name -> a model directory: ``gpt2-export`` (a random GPT of ours) and :data:`FAMILIES`."""
    from attnscope.model.ours.gpt import GPT, GPTConfig
    from attnscope.model.ours.gpt2_format import export_hf
    from attnscope.model.ours.tokenizer import BPETokenizer

    from tests.model.conftest import documents, randomize

    tokenizer = BPETokenizer.train(["\n".join(documents(40, 0))], vocab_size=300)
    torch.manual_seed(0)
    config = GPTConfig(block_size=48, vocab_size=tokenizer.vocab_size, n_layer=3, n_head=4, n_embd=32, name="dec")
    gpt = randomize(GPT(config), seed=1).eval()
    dirs = {"gpt2-export": export_hf(gpt, tokenizer, root / "gpt2")}
    for name in FAMILIES:
        dirs[name] = build_qwen3(root / name) if name == "qwen3" else build(name, root / name)
    return dirs


def blocks(model) -> list[torch.nn.Module]:
    return list(model.model.layers) if hasattr(model, "model") else list(model.transformer.h)


def attention(block) -> torch.nn.Module:
    return getattr(block, "self_attn", None) or block.attn


def out_projection(block) -> torch.nn.Module:
    attn = attention(block)
    return getattr(attn, "o_proj", None) or attn.c_proj


def final_norm(model) -> torch.nn.Module:
    return model.model.norm if hasattr(model, "model") else model.transformer.ln_f


_SEEN: dict = {}  # what the running oracle pass keeps (the tests run one at a time)


def _capture_qk(module, query, key, value, attention_mask, **kwargs):
    """Eager attention (the family's own where it differs: sinks, softcap), keeping q and k."""
    import importlib

    from transformers.models.llama.modeling_llama import eager_attention_forward

    _SEEN.setdefault("qk", {})[int(getattr(module, "layer_idx", 0) or 0)] = (query[0], key[0])
    own = getattr(importlib.import_module(type(module).__module__), "eager_attention_forward", eager_attention_forward)
    return own(module, query, key, value, attention_mask, **kwargs)


def oracle(path: Path) -> torch.nn.Module:
    """The model in transformers' eager attention (through :func:`_capture_qk`, which keeps q and k)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register("decomp_oracle", _capture_qk)
    AttentionMaskInterface.register("decomp_oracle", eager_mask)
    model_type = AutoConfig.from_pretrained(path).model_type
    impl = "eager" if model_type == "gpt2" else "decomp_oracle"
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=impl).eval()


@contextlib.contextmanager
def hooked(model):
    """Keep in ``_SEEN``: ``z`` and ``o`` per layer (the output projection's input and output),
    ``final`` (the final norm's input), ``qk`` per layer (query and key as eager multiplies them:
    GPT-2's from its c_attn) and ``qk_norm_in`` per layer (the q/k norms' inputs, where there are)."""
    _SEEN.clear()
    _SEEN.update(z={}, o={}, qk={}, qk_norm_in={})
    handles = []
    for i, block in enumerate(blocks(model)):
        proj = out_projection(block)
        handles.append(proj.register_forward_pre_hook(lambda m, a, i=i: _SEEN["z"].__setitem__(i, a[0][0])))
        handles.append(proj.register_forward_hook(lambda m, a, out, i=i: _SEEN["o"].__setitem__(i, out[0])))
        attn = attention(block)
        if hasattr(attn, "c_attn"):  # GPT-2: q, k from the fused projection
            handles.append(attn.c_attn.register_forward_hook(lambda m, a, out, i=i, at=attn: _gpt2_qk(i, out, at)))
        for side in ("q", "k"):
            norm = getattr(attn, f"{side}_norm", None)
            if norm is not None:
                handles.append(norm.register_forward_pre_hook(lambda m, a, i=i, side=side: _keep_norm_in(i, side, a)))
    handles.append(final_norm(model).register_forward_pre_hook(lambda m, a: _SEEN.__setitem__("final", a[0][0])))
    try:
        yield _SEEN
    finally:
        for handle in handles:
            handle.remove()


def _keep_norm_in(layer: int, side: str, args) -> None:
    _SEEN["qk_norm_in"].setdefault(layer, {})[side] = args[0][0]  # (T, n_heads, hs)


def _gpt2_qk(layer: int, out: torch.Tensor, attn) -> None:
    C = out.shape[-1] // 3
    nh = attn.num_heads
    q, k = out[0, :, :C], out[0, :, C : 2 * C]  # (T, C)
    _SEEN["qk"][layer] = (q.view(-1, nh, C // nh).transpose(0, 1), k.view(-1, nh, C // nh).transpose(0, 1))


def run(model, ids: list[int]) -> tuple[dict, torch.Tensor, tuple]:
    """One hooked eager pass: what :func:`hooked` keeps, the logits ``(T, V)`` and the hidden states."""
    with torch.no_grad(), hooked(model) as seen:
        out = model(torch.tensor([ids]), output_hidden_states=True)
    return dict(seen), out.logits[0], tuple(h[0] for h in out.hidden_states)


def rms_frozen(norm, x: torch.Tensor) -> torch.Tensor:
    """What an RMSNorm multiplies its input by at ``x`` (..., C), written out: gain / rms."""
    eps = getattr(norm, "variance_epsilon", None) or norm.eps
    gain = 1.0 + norm.weight.double() if "Gemma" in type(norm).__name__ else norm.weight.double()
    return gain * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + eps)


def norm_part(norm, x: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    """``part`` (..., C) of the norm's input ``x`` (C,) through the norm at ``x``'s scale, no offset."""
    if isinstance(norm, torch.nn.LayerNorm):
        x = x.double()
        inv = torch.rsqrt(x.var(unbiased=False) + norm.eps)
        part = part.double()
        return (part - part.mean(-1, keepdim=True)) * inv * norm.weight.double()
    return part.double() * rms_frozen(norm, x)


@torch.no_grad()
def expected_attribution(model, ids: list[int], position: int, token_id: int):
    """(heads (L, nh), mlps (L,), embed) recomputed from a hooked eager run, and its logit there:
    each head's slice of the output projection's input through the projection module (the others
    zeroed, the bias taken off), through Gemma 2's post-attention norm at its scale, then through
    the final norm at the scale it has on the text, dotted with the LM head's row."""
    seen, logits, hidden = run(model, ids[: position + 1])
    p, L = position, len(blocks(model))
    unembed = model.get_output_embeddings().weight[token_id].double()
    final_at = seen["final"][p]

    def logit_part(write: torch.Tensor) -> torch.Tensor:
        return norm_part(final_norm(model), final_at, write) @ unembed

    heads, mlps, attn_writes = [], [], []
    for layer, block in enumerate(blocks(model)):
        proj, z, o = out_projection(block), seen["z"][layer][p], seen["o"][layer][p]
        nh = model.config.num_attention_heads
        hs = z.shape[-1] // nh
        bias = 0.0 if proj.bias is None else proj.bias.double()
        post = block.post_attention_layernorm if hasattr(block, "post_feedforward_layernorm") else None
        row = []
        for h in range(nh):
            alone = torch.zeros_like(z)
            alone[h * hs : (h + 1) * hs] = z[h * hs : (h + 1) * hs]
            with torch.no_grad():
                write = proj(alone[None])[0].double() - bias
            row.append(logit_part(write * rms_frozen(post, o) if post is not None else write))
        heads.append(torch.stack(row))
        attn_writes.append(post(o[None])[0] if post is not None else o)
    outs = [*hidden[1:L], seen["final"]]  # each block's output (transformers' last hidden state is normed)
    for layer in range(L):
        mlps.append(logit_part(outs[layer][p].double() - hidden[layer][p].double() - attn_writes[layer].double()))
    return torch.stack(heads), torch.stack(mlps), logit_part(hidden[0][p]), logits[p, token_id]
