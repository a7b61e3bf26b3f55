"""What a transformers model's files say about it, read from its config before or beside its
weights: each layer's type (:func:`layer_types`), sliding window (:func:`sliding_windows`) and divisor rule
(:func:`layer_divisor_rules`), how it encodes positions, whether attnscope can open it at all
(:func:`preflight`), and the BOS its tokenizer adds (:func:`bos_token`).
:class:`~model.families.backend.TransformersBackend` puts them into its facts beside what its
probe pass measured; the image-text backend (:mod:`model.vision.backend`) reads them too.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..ours.checkpoint import CheckpointError


def sliding_windows(cfg, n_layer: int) -> list[int | None]:
    """Each layer's sliding window in tokens (None: full causal), as the config declares it."""
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    if not window:
        return [None] * n_layer
    if types:
        return [int(window) if t == "sliding_attention" else None for t in types][:n_layer]
    return [int(window) if getattr(cfg, "use_sliding_window", True) else None] * n_layer


# transformers' names of layer types (config.layer_types) -> ours (model.backends.LAYER_TYPES)
CONFIG_LAYER_TYPES = {
    "full_attention": "full",
    "attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
    "conv": "conv",
    "mamba": "ssm",
    "mamba2": "ssm",
}


def layer_types(cfg, n_layer: int, attention_layers: list[int], windows: list[int | None]) -> list[dict]:
    """What each of the model's layers is, ``{"index", "type"}`` and, where it applies, ``window``
    or ``chunk`` (tokens) and a ``note``: from ``config.layer_types`` where the config has them,
    else from whether the layer called our attention function (a softmax layer: full, or sliding
    by its window). A layer without rotary positions (Llama 4's ``no_rope_layers``) is ``nope``."""
    declared = list(getattr(cfg, "layer_types", None) or [])
    no_rope = getattr(cfg, "no_rope_layers", None)
    out = []
    for i in range(n_layer):
        attends = i in attention_layers
        kind = CONFIG_LAYER_TYPES.get(declared[i], "full" if attends else "ssm") if i < len(declared) else None
        if kind is None:
            kind = ("sliding" if windows[i] else "full") if attends else "ssm"
        layer: dict = {"index": i, "type": kind}
        if kind == "sliding" and windows[i]:
            layer["window"] = windows[i]
        if kind == "chunked":
            layer["chunk"] = int(cfg.attention_chunk_size)
        if attends and kind == "full" and no_rope is not None and i < len(no_rope) and not no_rope[i]:
            layer["type"] = "nope"
            if getattr(cfg, "attn_temperature_tuning", False):
                layer["note"] = (
                    "no rotary positions; queries scaled by "
                    "1 + attn_scale·log(⌊(position + 1) / floor_scale⌋ + 1) "
                    f"(attn_scale {cfg.attn_scale:g}, floor_scale {cfg.floor_scale:g})"
                )
        if not attends and kind in ("full", "sliding", "chunked", "nope"):
            layer["type"] = "ssm"  # declared attention that never called ours: say what we saw
        if attends and getattr(cfg, "model_type", "") == "falcon_h1":
            layer["note"] = "a Mamba-2 state-space mixer runs beside the attention; only the attention is drawn"
        out.append(layer)
    return out


def layer_divisor_rules(cfg, head_dim: int, divisors: list[float | None]) -> list[str | None]:
    """How the model defines each layer's divisor, named from its config: the first of
    ``"sqrt(head_dim)"``, ``"sqrt(query_pre_attn_scalar)"`` (Gemma 2 and 3),
    ``"sqrt(head_dim) * (layer + 1)"`` (GPT-2's ``scale_attn_by_inverse_layer_idx``) and
    ``"sqrt(head_dim) / mscale^2"`` (DeepSeek's MLA under YaRN, :func:`yarn_mscale`) and
    ``"sqrt(3 * head_dim)"`` (DeBERTa with two relative-position terms) whose value
    is the divisor the layer applied (``divisors``, from the probe), else
    ``"<divisor> (set by the model)"``."""
    qpas = getattr(cfg, "query_pre_attn_scalar", None)
    by_layer = bool(getattr(cfg, "scale_attn_by_inverse_layer_idx", False))
    mscale = yarn_mscale(cfg)
    terms = len(set(getattr(cfg, "pos_att_type", None) or []) & {"c2p", "p2c"})  # DeBERTa's position terms
    rules: list[str | None] = []
    for layer, divisor in enumerate(divisors):
        if divisor is None:  # no softmax attention in this layer
            rules.append(None)
            continue
        candidates = {"sqrt(head_dim)": math.sqrt(head_dim)}
        if qpas:
            candidates["sqrt(query_pre_attn_scalar)"] = math.sqrt(qpas)
        if by_layer:
            candidates["sqrt(head_dim) * (layer + 1)"] = math.sqrt(head_dim) * (layer + 1)
        if mscale is not None:  # DeepSeek's MLA under YaRN: the scale folds in the attention factor, squared
            candidates["sqrt(head_dim) / mscale^2"] = math.sqrt(head_dim) / mscale**2
        if terms:  # DeBERTa: content-to-content and each relative-position term, divided alike
            candidates[f"sqrt({1 + terms} * head_dim)"] = math.sqrt((1 + terms) * head_dim)
        named = (rule for rule, value in candidates.items() if math.isclose(divisor, value, rel_tol=1e-6))
        rules.append(next(named, f"{divisor:g} (set by the model)"))
    return rules


def yarn_mscale(cfg) -> float | None:
    """YaRN's attention factor that DeepSeek's MLA folds into its scale, squared (``mscale_all_dim``):
    ``1 + 0.1 · mscale_all_dim · ln(factor)``; None where the config has none."""
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    factor, all_dim = rope.get("factor"), rope.get("mscale_all_dim")
    if not all_dim or not factor or rope.get("rope_type", rope.get("type")) == "default":
        return None
    return 0.1 * all_dim * math.log(factor) + 1.0 if factor > 1 else 1.0


def position_encoding(cfg) -> str:
    """How the model encodes positions: ``learned`` (GPT-2), ``rotary`` or ``other``."""
    if getattr(cfg, "model_type", "") == "gpt2":
        return "learned"
    if getattr(cfg, "rope_theta", None) or getattr(cfg, "rope_parameters", None) or getattr(cfg, "rotary_pct", None):
        return "rotary"
    return "other"


def preflight(path: Path, seq2seq: bool = False):
    """What can be told without loading the weights: transformers present, a readable config of a
    decoder-only model (or, with ``seq2seq``, an encoder-decoder), a tokenizer.json. Returns the config;
    :class:`CheckpointError` otherwise."""
    try:
        from transformers import AutoConfig
    except ImportError as e:
        raise CheckpointError(
            f"{path} is a transformers model; install transformers to open it (pip install 'attnscope[transformers]')"
        ) from e
    try:
        cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as e:
        raise CheckpointError(f"cannot read the model config in {path}: {' '.join(str(e).split())}") from e
    if getattr(cfg, "is_encoder_decoder", False) and not seq2seq:
        raise CheckpointError(
            f"{path} holds an encoder-decoder model ({cfg.model_type}); "
            "attnscope opens it as an encoder-decoder only"
        )
    if not (path / "tokenizer.json").is_file():
        raise CheckpointError(f"no tokenizer.json in {path}: attnscope needs the fast tokenizer file beside the model")
    return cfg


def bos_token(path: Path, cfg) -> str | None:
    """The BOS the model's tokenizer adds to every text (``add_bos_token``), else None."""
    import json

    tc_file = path / "tokenizer_config.json"
    tc = json.loads(tc_file.read_text()) if tc_file.is_file() else {}
    bos = tc.get("bos_token")
    if isinstance(bos, dict):
        bos = bos.get("content")
    if tc.get("add_bos_token") and bos:
        return bos
    # a post-processor that inserts the BOS (Llama 3's TemplateProcessing) says the same
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(path / "tokenizer.json"))
    with_special = tk.encode("a", add_special_tokens=True).ids
    plain = tk.encode("a", add_special_tokens=False).ids
    if len(with_special) > len(plain) and with_special[1:] == plain[: len(with_special) - 1]:
        return tk.id_to_token(with_special[0])
    return None
