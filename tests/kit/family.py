"""Tiny random-weight models of other families, written to disk the way a user's download is.

Each is built from a transformers config in the test itself (no download), with the query and
key weights scaled up so attention patterns are far from uniform, and saved with a
``tokenizer.json`` beside it: our shipped byte-level BPE for the byte-level families, a
SentencePiece-style BPE (``▁``, byte fallback, ``<s>`` prefix) trained here for Llama.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import torch
from attnscope.model.ours.checkpoint import SHIPPED

QK_GAIN = 12.0  # query/key weights × this: peaky, far-from-uniform patterns
# the gain of q/k norms (QK-norm families), as a weight of 3, or 2 where the norm multiplies by 1 + weight
QK_NORM_GAIN = 3.0
QK_NORMS = ("q_norm.weight", "k_norm.weight", "q_layernorm.weight", "k_layernorm.weight")

SP_TEXT = [
    "The cat sat on the mat. The dog sat on the log.",
    "She told her brother that the train would leave at noon, so they packed early.",
    "Open the window, choose a network, and switch the connection on or off.",
    "A small dog ran across the park and chased the ball that the children had thrown.",
] * 20


def unigram(specials: list[str], unk: str):
    """A Unigram model of the test texts, the same every run: the special tokens, then every word of
    :data:`SP_TEXT` (``▁`` in front) and every character of them, scored by the log of their frequency."""
    from tokenizers import models

    words = Counter(f"▁{w}" for text in SP_TEXT for w in text.split())
    chars = Counter(c for text in SP_TEXT for w in text.split() for c in f"▁{w}")
    total = sum(words.values()) + sum(chars.values())
    scored = sorted(((piece, math.log(n / total)) for piece, n in (words + chars).items()), key=lambda x: (-x[1], x[0]))
    return models.Unigram([(s, 0.0) for s in specials] + scored, unk_id=specials.index(unk), byte_fallback=False)


def wordpiece(specials: list[str], unk: str):
    """A WordPiece model of the test texts, the same every run (the trainer's vocabulary is not): the special
    tokens, then every lower-cased word and punctuation mark of :data:`SP_TEXT`, and each of their characters
    alone and as a continuation (``##c``)."""
    from tokenizers import models

    words = sorted({w for text in SP_TEXT for w in re.findall(r"\w+|[^\w\s]", text.lower())})
    chars = sorted({c for w in words for c in w})
    pieces = list(dict.fromkeys([*specials, *words, *chars, *(f"##{c}" for c in chars)]))
    return models.WordPiece({piece: i for i, piece in enumerate(pieces)}, unk_token=unk)


def decoder(model_type: str, layers: int = 2, heads: int = 4, kv_heads: int | None = 2, **extra) -> dict:
    """Config kwargs of a small rotary decoder: ``heads`` query heads reading ``kv_heads`` key/value
    heads (None: the family has no such setting), hidden size 16 per query head unless given."""
    kwargs = dict(
        model_type=model_type,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        hidden_size=16 * heads,
        intermediate_size=128,
        max_position_embeddings=128,
        vocab_size=4096,
        tie_word_embeddings=False,
    )
    if kv_heads is not None:
        kwargs["num_key_value_heads"] = kv_heads
    return {**kwargs, **extra}


def family_configs() -> dict[str, dict]:
    """Family name -> transformers config kwargs (small: builds and runs in a fraction of a second)."""
    return {
        # a GPT-2 our own GPT cannot run exactly (scores also divided by the layer index): transformers runs it
        "gpt2": dict(
            model_type="gpt2",
            n_layer=2,
            n_head=4,
            n_embd=64,
            n_positions=128,
            scale_attn_by_inverse_layer_idx=True,
            vocab_size=4096,
            tie_word_embeddings=False,
        ),
        "gpt_neox": decoder("gpt_neox", kv_heads=None, rotary_pct=0.25),
        # grouped-query attention: 6 query heads read 2 key/value heads
        "llama": decoder("llama", layers=3, heads=6),
        "qwen2": decoder("qwen2"),
        # softcapping and a divisor of sqrt(query_pre_attn_scalar), not sqrt(head_dim)
        "gemma2": decoder(
            "gemma2", head_dim=16, query_pre_attn_scalar=64, attn_logit_softcapping=20.0, sliding_window=6
        ),
        # every layer a sliding window of 5 tokens: shorter than most test texts
        "mistral": decoder("mistral", head_dim=16, sliding_window=5),
        # learned attention sinks (set in build: rows sum to well under 1), sliding and full layers, MoE
        "gpt_oss": decoder(
            "gpt_oss",
            head_dim=16,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
            num_local_experts=2,
            num_experts_per_tok=1,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        # hybrids: only some layers are softmax attention, numbered as the model numbers them
        # linear attention (Gated DeltaNet) in layers 0 and 2, gated softmax attention in 1 and 3
        "qwen3_next": decoder(
            "qwen3_next",
            layers=4,
            head_dim=16,
            full_attention_interval=2,
            linear_num_key_heads=2,
            linear_num_value_heads=2,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
            num_experts=2,
            num_experts_per_tok=1,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
        ),
        "lfm2": decoder("lfm2", layers=4, layer_types=["conv", "full_attention", "conv", "full_attention"]),
        "falcon_h1": decoder(  # Mamba-2 beside the attention in every layer
            "falcon_h1",
            head_dim=16,
            mamba_d_ssm=32,
            mamba_n_heads=2,
            mamba_d_head=16,
            mamba_n_groups=1,
            mamba_d_state=8,
        ),
        # chunked attention (chunks of 4 tokens) in layer 0, a full layer without RoPE (NoPE) in layer 1, MoE
        "llama4_text": decoder(
            "llama4_text",
            head_dim=16,
            attention_chunk_size=4,
            no_rope_layers=[1, 0],
            num_local_experts=2,
            num_experts_per_tok=1,
            intermediate_size_mlp=64,
            interleave_moe_layer_step=1,
        ),
        # differential attention: 4 query heads = 2 pairs, each pattern softmax₁ − λ·softmax₂ (λ learned per layer)
        "diffllama": decoder("diffllama", head_dim=16),
        # multi-head latent attention: q/k heads of 8 (no RoPE) + 4 (RoPE) = 12, v heads of 8;
        # YaRN's mscale in the divisor
        "deepseek_v3": decoder(
            "deepseek_v3",
            kv_heads=4,
            q_lora_rank=32,
            kv_lora_rank=16,
            qk_nope_head_dim=8,
            qk_rope_head_dim=4,
            v_head_dim=8,
            n_routed_experts=2,
            num_experts_per_tok=1,
            first_k_dense_replace=1,
            moe_intermediate_size=32,
            n_group=1,
            topk_group=1,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 32,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
        ),
    }


def softmaxes(trace) -> torch.Tensor:
    """(L, nh, T, T) the softmax maps as transformers' eager ``output_attentions`` has them: the
    pattern, or with differential attention each pair's two softmaxes (query heads h and h + nh/2)."""
    if trace.pattern_parts is None:
        return trace.pattern
    return torch.cat([trace.pattern_parts[:, :, 0], trace.pattern_parts[:, :, 1]], dim=1)


def first_softmax(trace) -> torch.Tensor:
    """(L, nh, T, T) the softmax each head's statistics and ``pattern_unscaled`` describe: the
    pattern, or a differential pair's first softmax."""
    return trace.pattern if trace.pattern_parts is None else trace.pattern_parts[:, :, 0]


def build_all(families, root: Path) -> dict[str, Path]:
    """``build`` each family into its own folder under ``root``: name -> folder."""
    return {name: build(name, root / name) for name in families}


def sentencepiece_tokenizer():
    """A Llama-style tokenizer.json: ``▁`` for spaces, byte fallback ``<0xNN>``, ``<s>`` added in front."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tk = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tk.decoder = decoders.Sequence(
        [decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="first")]
    )
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials + byte_tokens, show_progress=False)
    tk.train_from_iterator(SP_TEXT, trainer=trainer)
    tk.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tk.token_to_id("<s>"))]
    )
    return tk


def random_download(out: Path, model_type: str, **config) -> Path:
    """A ``model_type`` model of random weights (seed 0) and our shipped 4096-token tokenizer, saved like a download."""
    from transformers import AutoConfig, AutoModelForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_bytes((SHIPPED / "tokenizer.json").read_bytes())
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, vocab_size=4096, **config)).save_pretrained(out)
    return out


def build(family: str, out: Path, seed: int = 0) -> Path:
    """Write a tiny random ``family`` model and its tokenizer to ``out``; returns ``out``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = dict(family_configs()[family])
    model_type = kwargs.pop("model_type")
    out.mkdir(parents=True, exist_ok=True)
    if family == "llama":
        tk = sentencepiece_tokenizer()
        kwargs["vocab_size"] = tk.get_vocab_size()
        kwargs.update(bos_token_id=tk.token_to_id("<s>"), eos_token_id=tk.token_to_id("</s>"))
        tk.save(str(out / "tokenizer.json"))
        tokenizer_config = {
            "tokenizer_class": "LlamaTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "add_bos_token": True,
        }
    else:
        (out / "tokenizer.json").write_bytes((SHIPPED / "tokenizer.json").read_bytes())
        tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))

    config = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(
                key in name
                for key in (
                    "q_proj.weight",
                    "k_proj.weight",
                    "c_attn.weight",
                    "query_key_value.weight",
                    "q_b_proj.weight",  # MLA: queries from their low-rank latent
                    "kv_b_proj.weight",  # MLA: keys (and values) from theirs
                    "kv_a_proj_with_mqa.weight",  # MLA: the keys' RoPE part
                )
            ):
                p.mul_(QK_GAIN)
            if name.endswith(QK_NORMS):  # QK-norm undoes a larger projection: the norm's own gain instead
                p.copy_(torch.full_like(p, QK_NORM_GAIN) - (1.0 if p.abs().max() < 0.5 else 0.0))
            if name.endswith("self_attn.sinks"):  # gpt-oss: one sink logit per head, from none to a large share
                p.copy_(torch.linspace(-1.0, 3.0, p.numel()))
    model.save_pretrained(out)
    return out


# each divisor rule a backend may name (ModelFacts.layer_divisor_rules), read with a config's numbers
DIVISOR_RULES = {
    "sqrt(head_dim)": lambda cfg, layer: math.sqrt(config_head_dim(cfg)),
    "sqrt(query_pre_attn_scalar)": lambda cfg, layer: math.sqrt(cfg.query_pre_attn_scalar),
    "sqrt(head_dim) * (layer + 1)": lambda cfg, layer: math.sqrt(config_head_dim(cfg)) * (layer + 1),
    # DeepSeek V3: the q/k head (no-RoPE + RoPE parts) and YaRN's mscale, written out from the paper
    "sqrt(head_dim) / mscale^2": lambda cfg, layer: math.sqrt(config_head_dim(cfg))
    / (0.1 * cfg.rope_parameters["mscale_all_dim"] * math.log(cfg.rope_parameters["factor"]) + 1) ** 2,
}


def config_head_dim(cfg) -> int:
    """The q/k head size a transformers config declares (MLA: its no-RoPE and RoPE parts; else
    ``head_dim``, else hidden size / heads)."""
    if getattr(cfg, "qk_rope_head_dim", None):
        return cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
