"""Small GGUF files written by the tests themselves, the way llama.cpp's converter writes them.

A tiny random transformers model (tests/kit/family.py: query/key weights ×12, so patterns are
far from uniform) is written with the ``gguf`` package's :class:`gguf.GGUFWriter`: llama.cpp's
tensor names (``blk.N.attn_q.weight``, ...) and layouts (Llama's q/k rows permuted for its
rotary kernel, GPT-2's Conv1D weights transposed), 1-D tensors in F32 and the matrices in the
asked type (``F32``, ``F16``, ``Q8_0``, ``Q4_1``, ... through ``gguf.quants.quantize``), and
the tokenizer as metadata: ``tokenizer.ggml.model`` ``llama`` (SentencePiece style: tokens,
scores, token types) or ``gpt2`` (byte-level BPE: tokens, merges), BOS/EOS ids.

The oracle in the tests is transformers reading the same file
(``from_pretrained(dir, gguf_file=file, attn_implementation="eager")``), so a quantized file's
rounding is no error: both sides see the same dequantized weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from attnscope.model.ours.checkpoint import SHIPPED

from tests.kit.family import QK_GAIN, family_configs, sentencepiece_tokenizer

# GGUF architecture, as general.architecture names it, for each family written here
ARCH = {"llama": "llama", "qwen2": "qwen2", "gpt2": "gpt2", "gemma2": "gemma2"}
FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9}


def tiny_model(family: str, vocab_size: int, seed: int = 0):
    """A random ``family`` model (familykit's config) with ``vocab_size`` tokens, q/k × QK_GAIN."""
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = dict(family_configs()[family], vocab_size=vocab_size)
    model_type = kwargs.pop("model_type")
    if family == "gemma2":  # llama.cpp's Gemma 2 has no output.weight: the head is the embedding
        kwargs["tie_word_embeddings"] = True
    if family == "gpt2":  # a plain GPT-2: a GGUF has no key for scale_attn_by_inverse_layer_idx
        kwargs.pop("scale_attn_by_inverse_layer_idx")
        kwargs["tie_word_embeddings"] = True
        # transformers reads GPT-2's context_length as n_ctx, and sizes the position table by n_positions
        # (1024 unless set): a file with another context loads only at 1024
        kwargs["n_positions"] = 1024
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **kwargs))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(key in name for key in ("q_proj.weight", "k_proj.weight", "c_attn.weight")):
                p.mul_(QK_GAIN)
    return model.eval()


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (transformers undoes it on load)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tokenizer_metadata(writer, family: str):
    """Write the tokenizer; returns its vocabulary size."""
    import gguf

    if family == "llama":  # SentencePiece style: ▁ for spaces, byte fallback, <s> in front
        tk = sentencepiece_tokenizer()
        vocab = sorted(tk.get_vocab().items(), key=lambda kv: kv[1])
        tokens = [t for t, _ in vocab]
        types = []
        for t in tokens:
            if t == "<unk>":
                types.append(gguf.TokenType.UNKNOWN)
            elif t in ("<s>", "</s>"):
                types.append(gguf.TokenType.CONTROL)
            elif t.startswith("<0x") and len(t) == 6:
                types.append(gguf.TokenType.BYTE)
            else:
                types.append(gguf.TokenType.NORMAL)
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores([-float(i) for i in range(len(tokens))])  # earlier merges score higher
        writer.add_token_types(types)
        writer.add_bos_token_id(tk.token_to_id("<s>"))
        writer.add_eos_token_id(tk.token_to_id("</s>"))
        writer.add_unk_token_id(tk.token_to_id("<unk>"))
        writer.add_add_bos_token(True)
        return len(tokens)
    # byte-level BPE (GPT-2, Qwen2): the shipped model's tokenizer
    spec = json.loads((SHIPPED / "tokenizer.json").read_text())
    vocab = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    eot = tokens.index("<|endoftext|>")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2" if family == "qwen2" else "gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if i == eot else gguf.TokenType.NORMAL for i in range(len(tokens))])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eot)
    writer.add_eos_token_id(eot)
    writer.add_add_bos_token(False)
    return len(tokens)


def _model_metadata(writer, family: str, cfg) -> None:
    if family == "gpt2":
        writer.add_context_length(cfg.n_positions)
        writer.add_embedding_length(cfg.n_embd)
        writer.add_feed_forward_length(4 * cfg.n_embd)
        writer.add_block_count(cfg.n_layer)
        writer.add_head_count(cfg.n_head)
        writer.add_layer_norm_eps(cfg.layer_norm_epsilon)
        return
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    writer.add_rope_dimension_count(head_dim)
    if family == "gemma2":
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
        writer.add_sliding_window(cfg.sliding_window)


def _tensors(model, family: str):
    """(gguf name, numpy array in llama.cpp's layout) for every weight of ``model``."""
    import gguf

    cfg = model.config
    n_layer = cfg.n_layer if family == "gpt2" else cfg.num_hidden_layers
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[ARCH[family].upper()], n_layer)
    for hf_name, p in model.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:  # the embedding: not stored twice
            continue
        stem, suffix = hf_name.rsplit(".", 1)
        name = names.get_name(stem)
        assert name is not None, f"no GGUF name for {hf_name}"
        w = p.detach().float().numpy().copy()
        if family == "llama" and name.endswith("attn_q"):
            w = _permute(w, cfg.num_attention_heads)
        elif family == "llama" and name.endswith("attn_k"):
            w = _permute(w, cfg.num_key_value_heads)
        elif family == "gemma2" and "norm" in name:
            w = w + 1  # llama.cpp stores Gemma's (1 + w) norms
        elif (
            family == "gpt2"
            and suffix == "weight"
            and name.split(".")[-1] in ("attn_qkv", "attn_output", "ffn_up", "ffn_down")
        ):
            w = w.T.copy()  # Conv1D (in, out) -> llama.cpp's (out, in)
        yield f"{name}.{suffix}", w


def write(
    family: str, out: Path, qtype: str = "F32", seed: int = 0, name: str | None = None, chat_template: str | None = None
) -> Path:
    """A tiny random ``family`` model written to the GGUF file ``out`` with its matrices in ``qtype``
    (and ``tokenizer.chat_template`` when given)."""
    import gguf

    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(out), ARCH[family])
    writer.add_name(name or f"tiny-{family}")
    writer.add_file_type(FILE_TYPE[qtype])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    vocab_size = _tokenizer_metadata(writer, family)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    model = tiny_model(family, vocab_size, seed)
    _model_metadata(writer, family, model.config)
    q = gguf.GGMLQuantizationType[qtype]
    for tname, w in _tensors(model, family):
        if w.ndim == 1 or q == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(tname, w.astype(np.float32))
        elif q == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(tname, w.astype(np.float16))
        else:
            writer.add_tensor(tname, gguf.quants.quantize(w, q), raw_dtype=q)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def transformers_original(out: Path, seed: int = 0) -> Path:
    """The GPT-2 that :func:`write` ("gpt2", the same ``seed``) makes a file of, saved by transformers to the
    folder ``out`` with the shipped tokenizer (the file's too): a quantized file's original."""
    vocab = len(json.loads((SHIPPED / "tokenizer.json").read_text())["model"]["vocab"])
    tiny_model("gpt2", vocab, seed).save_pretrained(out)
    (out / "tokenizer.json").write_bytes((SHIPPED / "tokenizer.json").read_bytes())
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def eager_reference(path: Path, ids: list[int], dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """transformers' own eager attention on the same GGUF file, in ``dtype`` on ``device``:
    (attentions (L, nh, T, T), logits (T, V)), as float32 on the CPU."""
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=str(path), attn_implementation="eager", dtype=dtype
    ).to(device)
    with torch.no_grad():
        out = ref(torch.tensor([ids], device=device), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).float().cpu(), out.logits[0].float().cpu()


def ollama_folder(
    root: Path,
    blob_source: Path,
    name: str = "library/tinyllama",
    tag: str = "latest",
    host: str = "registry.ollama.ai",
) -> Path:
    """An Ollama models folder as ``ollama pull`` leaves it: a manifest naming the model blob by digest."""
    import hashlib

    data = blob_source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    template = b"{{ .Prompt }}"
    tdigest = hashlib.sha256(template).hexdigest()
    (root / "blobs" / f"sha256-{tdigest}").write_bytes(template)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "digest": "sha256:" + "0" * 64,
            "size": 2,
        },
        "layers": [
            {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)},
            {
                "mediaType": "application/vnd.ollama.image.template",
                "digest": f"sha256:{tdigest}",
                "size": len(template),
            },
        ],
    }
    mdir = root / "manifests" / host / name
    mdir.mkdir(parents=True, exist_ok=True)
    (mdir / tag).write_text(json.dumps(manifest))
    return root
