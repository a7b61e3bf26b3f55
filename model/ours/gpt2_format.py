"""Hugging Face GPT-2 format: export our model, and load a GPT-2 directory into it.

Our module names are GPT-2's (``transformer.wte``, ``transformer.h.0.attn.c_attn``, …), so
the mapping is short:

* GPT-2 stores its projections as ``Conv1D`` with the weight as ``(in, out)``; ours are
  ``nn.Linear`` with ``(out, in)``, so those four weights per block are transposed;
* ``lm_head.weight`` is tied to ``transformer.wte.weight`` and written once;
* old GPT-2 checkpoints have no ``transformer.`` prefix and carry the causal-mask buffers
  ``attn.bias`` / ``attn.masked_bias``, which are skipped.

:func:`export_hf` writes the weights with ``safetensors`` directly, so exporting needs no
``transformers``; the result loads offline with
``transformers.GPT2LMHeadModel.from_pretrained(DIR)`` and
``transformers.PreTrainedTokenizerFast(tokenizer_file=DIR / "tokenizer.json")``
(or ``AutoTokenizer.from_pretrained(DIR)``).

:func:`load_hf_dir` reads such a directory (``model.safetensors``, a sharded safetensors
index, or ``pytorch_model.bin``; ``tokenizer.json`` or ``vocab.json`` + ``merges.txt``) and
refuses configurations our architecture cannot run exactly, for example another activation,
``scale_attn_by_inverse_layer_idx`` or cross-attention.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from .checkpoint import CheckpointError, read_config
from .gpt import GPT, GPTConfig
from .tokenizer import EOT, BPETokenizer

log = logging.getLogger(__name__)

# GPT-2 modules stored as Conv1D, weight (in, out); ours are nn.Linear, weight (out, in)
CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# causal-mask buffers found in older GPT-2 checkpoints; not weights
MASK_BUFFERS = ("attn.bias", "attn.masked_bias")
# activations our MLP computes exactly: all three are 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
# GPT2Config's defaults, used for fields a config.json leaves out (as transformers does)
HF_DEFAULTS = {
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}


def _is_conv1d_weight(key: str) -> bool:
    return key.endswith(CONV1D_WEIGHTS)


def _is_mask_buffer(key: str) -> bool:
    # "h.0.attn.bias" is a buffer; "h.0.attn.c_attn.bias" is a weight that merely ends the same way
    parts = key.split(".")
    return len(parts) >= 2 and ".".join(parts[-2:]) in MASK_BUFFERS


# ------------------------------------------------------------------ export


def hf_config(config: GPTConfig, eot_id: int, name: str | None = None) -> dict:
    """The ``config.json`` of a GPT-2 model equal to ours; ``attnscope_name`` (the name attnscope shows
    for it) is ``name``, else the model's own."""
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": config.vocab_size,
        "n_positions": config.block_size,
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_inner": None,  # 4 * n_embd
        "activation_function": "gelu_new",
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "summary_first_dropout": 0.0,
        "layer_norm_epsilon": config.layer_norm_epsilon,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "add_cross_attention": False,
        "tie_word_embeddings": True,
        "bos_token_id": eot_id,
        "eos_token_id": eot_id,
        "use_cache": True,
        "dtype": "float32",
        "attnscope_name": name or config.name,
    }


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """Our weights under GPT-2's names and layouts, on the CPU, contiguous, ``lm_head`` left out (tied)."""
    state = {}
    for key, tensor in model.state_dict().items():
        if key == "lm_head.weight":
            continue
        t = tensor.detach().to("cpu", torch.float32)
        if _is_conv1d_weight(key):
            t = t.t()  # Linear (out, in) -> Conv1D (in, out)
        state[key] = t.contiguous().clone()
    return state


def export_hf(model: GPT, tokenizer: BPETokenizer, out_dir: str | Path, name: str | None = None) -> Path:
    """Write ``model`` and ``tokenizer`` as a Hugging Face GPT-2 directory; returns its path. attnscope
    shows the copy as ``name`` (``attnscope export-hf`` gives the folder's name), else as the model's own."""
    if tokenizer.eot_id is None:
        raise ValueError(f"the tokenizer has no {EOT} token, which GPT-2 uses as bos/eos")
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model only {model.config.vocab_size} embeddings"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    eot = tokenizer.eot_id
    weights = out / "model.safetensors"
    save_file(hf_state_dict(model), str(weights), metadata={"format": "pt"})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(weights, 0o666 & ~umask)  # safetensors writes 0600; give it the mode of the other files
    _write_json(out / "config.json", hf_config(model.config, eot, name))
    _write_json(out / "generation_config.json", {"bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot})
    tokenizer.save(out / "tokenizer.json")
    special = {"bos_token": EOT, "eos_token": EOT, "unk_token": EOT}
    _write_json(out / "special_tokens_map.json", special)
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **special,
            "model_max_length": model.config.block_size,
            "add_prefix_space": False,
            "clean_up_tokenization_spaces": False,  # decode must give back the text exactly
        },
    )
    return out


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


# ------------------------------------------------------------------ load


def gpt_config_from_hf(cfg: dict, name: str = "gpt2") -> GPTConfig:
    """Our config for a GPT-2 ``config.json``; :class:`CheckpointError` if we cannot run it exactly."""
    if cfg.get("model_type") != "gpt2":
        raise CheckpointError(f"not a GPT-2 config: model_type is {cfg.get('model_type')!r}")
    c = {**HF_DEFAULTS, **cfg}
    if "n_positions" not in cfg and cfg.get("n_ctx") is not None:
        c["n_positions"] = cfg["n_ctx"]  # the oldest configs name the context n_ctx

    act = c["activation_function"]
    if act == "gelu":
        log.warning('activation "gelu" (exact, erf) runs here as its tanh approximation; outputs differ slightly')
    elif act not in TANH_GELUS:
        raise CheckpointError(f"unsupported activation_function {act!r}: the MLP computes {' / '.join(TANH_GELUS)}")
    unsupported = {
        "scale_attn_weights": (False, "attention scores are always divided by sqrt(head_dim)"),
        "scale_attn_by_inverse_layer_idx": (True, "scores are not divided by the layer index"),
        "add_cross_attention": (True, "the model has no cross-attention"),
    }
    for key, (bad, why) in unsupported.items():
        if bool(c[key]) == bad:
            raise CheckpointError(f"unsupported config {key}={c[key]!r}: {why}")
    # reorder_and_upcast_attn only changes the order of fp16 operations; in fp32 it is the same function.
    n_embd, n_head = int(c["n_embd"]), int(c["n_head"])
    if n_head <= 0 or n_embd % n_head:
        raise CheckpointError(f"n_embd={n_embd} is not divisible by n_head={n_head}")
    if c["n_inner"] is not None and int(c["n_inner"]) != 4 * n_embd:
        raise CheckpointError(f"unsupported n_inner={c['n_inner']}: the MLP width is 4 * n_embd = {4 * n_embd}")
    return GPTConfig(
        block_size=int(c["n_positions"]),
        vocab_size=int(c["vocab_size"]),
        n_layer=int(c["n_layer"]),
        n_head=n_head,
        n_embd=n_embd,
        dropout=0.0,
        layer_norm_epsilon=float(c["layer_norm_epsilon"]),
        name=str(cfg.get("attnscope_name") or name),
    )


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    single = path / "model.safetensors"
    index = path / "model.safetensors.index.json"
    legacy = path / "pytorch_model.bin"
    try:
        if single.is_file():
            return load_file(str(single))
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            state: dict[str, torch.Tensor] = {}
            for shard in shards:
                state.update(load_file(str(path / shard)))
            return state
        if legacy.is_file():
            return torch.load(legacy, map_location="cpu", weights_only=True)
    except Exception as e:  # safetensors, json and torch raise several types on bad files
        raise CheckpointError(f"cannot read the weights in {path}: {e}") from e
    raise CheckpointError(f"no weights in {path}: expected model.safetensors, its index, or pytorch_model.bin")


def our_state_dict(hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """GPT-2 weights (any of its key spellings) -> our state dict, ``lm_head`` tied to ``wte``."""
    state: dict[str, torch.Tensor] = {}
    lm_head = None
    for key, tensor in hf_state.items():
        if key == "lm_head.weight":
            lm_head = tensor
            continue
        if _is_mask_buffer(key):
            continue
        if not key.startswith("transformer."):
            key = "transformer." + key
        t = tensor.to(torch.float32)
        state[key] = t.t().contiguous() if _is_conv1d_weight(key) else t
    wte = state.get("transformer.wte.weight")
    if wte is None:
        raise CheckpointError("the weights have no token embedding (wte.weight)")
    if lm_head is not None and not torch.equal(lm_head.to(torch.float32), wte):
        raise CheckpointError("lm_head.weight differs from wte.weight; only tied output embeddings are supported")
    state["lm_head.weight"] = wte
    return state


def load_hf_tokenizer(path: Path) -> BPETokenizer:
    """``tokenizer.json``, or GPT-2's ``vocab.json`` + ``merges.txt`` as a byte-level BPE."""
    tok_file, vocab, merges = path / "tokenizer.json", path / "vocab.json", path / "merges.txt"
    try:
        if tok_file.is_file():
            tk = Tokenizer.from_file(str(tok_file))
        elif vocab.is_file() and merges.is_file():
            tk = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
            tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tk.decoder = decoders.ByteLevel()
            tk.add_special_tokens([EOT])
        else:
            raise CheckpointError(f"no tokenizer in {path}: expected tokenizer.json, or vocab.json and merges.txt")
        tokenizer = BPETokenizer(tk)
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"cannot read the tokenizer in {path}: {e}") from e
    if tokenizer.eot_id is None:
        raise CheckpointError(f"the tokenizer in {path} has no {EOT} token")
    return tokenizer


def load_hf_dir(path: str | Path) -> tuple[GPT, BPETokenizer]:
    """Load a Hugging Face GPT-2 directory into our :class:`GPT` (CPU, eval mode) and tokenizer."""
    path = Path(path)
    cfg = read_config(path)
    config = gpt_config_from_hf(cfg, name=path.name)
    tokenizer = load_hf_tokenizer(path)
    if tokenizer.vocab_size > config.vocab_size:
        raise CheckpointError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model only {config.vocab_size} embeddings"
        )
    state = our_state_dict(_read_weights(path))
    model = GPT(config)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:  # missing / unexpected keys, shape mismatches
        raise CheckpointError(f"the weights in {path} do not fit the config: {e}") from e
    return model.eval(), tokenizer
