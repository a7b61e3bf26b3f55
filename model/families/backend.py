"""Any local transformers causal LM as a backend: loading it, what it is, running it recorded.

:func:`load_transformers_dir` opens a model directory offline with
``attn_implementation="attnscope"``, so that every attention layer calls our function
(:mod:`model.families.attention`). :class:`TransformersBackend` then runs it inside
:func:`~model.families.attention.recording` and tells its facts (:class:`~model.backends.ModelFacts`)
from one short probe pass: each layer's divisor, softcap and sliding window as the model
applies them, with each divisor named from the config (:func:`layer_divisor_rules`).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch.nn import functional as F

from ..backends import DTYPES, ModelFacts, parameter_count
from ..chat import folder_template, with_chat
from ..options import AttentionOptions
from ..ours.checkpoint import CheckpointError
from ..ours.tokenizer import BPETokenizer
from ..placement import input_device, layer_devices
from ..precision import exact_fp32
from ..trace import AttentionTrace
from .attention import IMPLEMENTATION, recording, register, watch_output_gates
from .differential import differential_lambda, is_differential
from .mrope import mrope_positions


class _Probe(list):
    """A sink for the load-time probe: layer facts only."""

    needs_unscaled = False


class TransformersBackend:
    """A transformers ``AutoModelForCausalLM`` with every attention layer recorded."""

    def __init__(self, model: torch.nn.Module, tokenizer: BPETokenizer, device: torch.device, name: str):
        self.model = model.eval()
        # the decoder without its LM head: transformers' base_model, or ``model.model`` where the
        # base_model_prefix does not name it (Llama 4's text model: base_model would be the whole LM)
        self.trunk = model.base_model if model.base_model is not model else getattr(model, "model", model)
        # the decoder layers' parent: the trunk, or an image-text model's language model inside it
        self.decoder = next(
            (m for m in (getattr(self.trunk, n, None) for n in ("language_model", "text_model")) if m is not None),
            self.trunk,
        )  # Idefics3 and SmolVLM call it text_model
        self.tokenizer = tokenizer
        self.device = device
        self.chat_template = None  # a ChatTemplate where the model has one (model.chat)
        gated = watch_output_gates(model)
        cfg = model.config.get_text_config()  # an image-text model's language model (its own config elsewhere)
        self.family = str(cfg.model_type)

        # one short pass tells each layer's divisor, softcap and window as the model applies them
        probe = _Probe()
        T = 4
        with recording(probe, AttentionOptions()):
            self.run_ids(list(_probe_ids(tokenizer, T)), logits=False)
        if not probe:  # e.g. Mamba, RWKV: no softmax attention layer called our function
            raise CheckpointError(
                f"{name}: the model ran without calling an attention function; attnscope shows softmax "
                "attention, and this architecture has none it can record (state-space and linear-attention "
                "models are not supported)"
            )
        numbers = [t.layer for t in probe]  # the model's own numbers of the layers that called our function
        twice = sorted({n for n in numbers if numbers.count(n) > 1})
        if twice:  # a layer that calls attention more than once in a way attnscope does not know
            raise CheckpointError(
                f"{name}: layer {twice[0]} of this {self.family} model computes attention more than once per token "
                "in a way attnscope does not know; it cannot show its combined map exactly"
            )
        first = probe[0]
        n_head, head_dim = int(first.q.shape[1]), int(first.q.shape[-1])
        d_model = int(getattr(cfg, "hidden_size", 0) or n_head * head_dim)
        n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_head)
        n_layer = max(int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0) or 0), numbers[-1] + 1)
        windows = _windows(cfg, n_layer)
        by_number = {t.layer: t for t in probe}
        divisors = [by_number[i].divisor if i in by_number else None for i in range(n_layer)]
        self.facts = ModelFacts(
            name=name,
            family=self.family,
            n_layer=n_layer,
            attention_layers=numbers,
            layers=layer_types(cfg, n_layer, numbers, windows),
            n_head=n_head,
            n_kv_head=n_kv,
            head_dim=head_dim,
            v_head_dim=int(first.v.shape[-1]),
            score_parts=first.attn_scores_content is not None,
            output_gates=gated > 0,
            lambdas=_lambdas(model, n_layer),
            d_model=d_model,
            layer_divisors=divisors,
            layer_divisor_rules=layer_divisor_rules(cfg, head_dim, divisors),
            block_size=int(getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 2048),
            vocab_size=int(cfg.vocab_size),
            positions=_positions(cfg),
            parameters=parameter_count(model),
            dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
            device=str(device),
            softcap=first.softcap,
            sliding_window=windows,
            bos_token=tokenizer.tk.id_to_token(tokenizer.bos_id) if tokenizer.bos_id is not None else None,
        )

    def run_ids(self, ids: list[int], logits: bool) -> torch.Tensor | None:
        """Token ids through the model (recorded by whatever :func:`recording` is running): logits
        ``(T, V)``, or ``None`` with ``logits=False`` (the LM head skipped)."""
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        if not logits:
            self.trunk(input_ids=idx, use_cache=False)
            return None
        return self.model(input_ids=idx, use_cache=False).logits[0]  # (T, V)

    @torch.inference_mode()
    @exact_fp32()
    def run(self, ids: list[int], opts: AttentionOptions, sink, logits: bool = True) -> torch.Tensor | None:
        """Token ids -> each layer's :class:`AttentionTrace` into ``sink``; logits ``(T, V)`` or ``None``."""
        with recording(sink, opts):
            return self.run_ids(ids, logits)

    @torch.inference_mode()
    @exact_fp32()
    def hidden(self, ids: list[int], opts: AttentionOptions, sink) -> torch.Tensor:
        """Like :meth:`run`, but returns what the LM head reads, ``(T, C)``."""
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        with recording(sink, opts):
            return self.trunk(input_ids=idx, use_cache=False).last_hidden_state[0]

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """(n, C) -> logits (n, V), with the output scaling a family applies after its LM head."""
        cfg = self.model.config.get_text_config()
        logits = self.model.get_output_embeddings()(h)
        if getattr(cfg, "logits_scaling", None):  # Granite
            logits = logits / cfg.logits_scaling
        if getattr(cfg, "logit_scale", None):  # Cohere
            logits = logits * cfg.logit_scale
        cap = getattr(cfg, "final_logit_softcapping", None)  # Gemma 2
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    @torch.inference_mode()
    @exact_fp32()
    def patterns(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids ``(B, T)`` -> the trained model's patterns ``(B, L, nh, T, T)`` on the CPU."""
        trace: list[AttentionTrace] = []
        with recording(trace, AttentionOptions()):
            self.trunk(input_ids=idx.to(self.device), use_cache=False)
        return torch.stack([t.pattern for t in trace], dim=1).float().cpu()  # (B, L, nh, T, T)

    @torch.inference_mode()
    @exact_fp32()
    def last_logits(self, idx: torch.Tensor, opts: AttentionOptions, at: int = -1, **inputs) -> torch.Tensor:
        """Token ids ``(B, T)`` -> the logits after the last position (or position ``at``) ``(B, V)``,
        float32 (head effects); ``inputs``: what else the model reads (an image-text model's ``pixel_values``)."""
        with recording(_Discard(), opts):
            h = self.trunk(input_ids=idx.to(self.device), use_cache=False, **inputs).last_hidden_state
        return self.head(h[:, at]).float()

    def start_generation(self) -> object:
        """A fresh transformers cache for :meth:`step` (its first step puts on it what the later ones share:
        multimodal RoPE's position delta, :func:`~.mrope.mrope_positions`)."""
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    @torch.inference_mode()
    @exact_fp32()
    def step(self, ids: list[int], cache, opts: AttentionOptions, **inputs) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Generation: the tokens after those in ``cache`` -> logits after the last one ``(V,)`` and
        each layer's pattern row of that last token ``(nh, S)`` over every token so far (keys a
        sliding window dropped from the cache: weight 0); ``inputs`` as :meth:`last_logits`'."""
        start = cache.get_seq_length()
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T_new)
        positions = mrope_positions(self.trunk, idx, cache, inputs)
        rows = _Rows()
        with recording(rows, opts):
            out = self.model(
                input_ids=idx, past_key_values=cache, use_cache=True, logits_to_keep=1, **positions, **inputs
            )
        S = start + len(ids)
        patterns = []
        for pattern in rows:  # (nh, S') with S' ≤ S
            patterns.append(F.pad(pattern, (S - pattern.shape[-1], 0)) if pattern.shape[-1] < S else pattern)
        return out.logits[0, -1].float(), patterns


class _Discard:
    """A sink that keeps nothing."""

    needs_unscaled = False

    def append(self, trace: AttentionTrace) -> None:
        pass


class _Rows(list):
    """A sink that keeps each layer's last pattern row (nh, S)."""

    needs_unscaled = False

    def append(self, trace: AttentionTrace) -> None:
        super().append(trace.pattern[0, :, -1].float())


def _lambdas(model: torch.nn.Module, n_layer: int) -> list[float | None]:
    """Per layer, differential attention's λ (DiffLlama); empty for any other model."""
    found = {int(m.layer_idx): differential_lambda(m) for m in model.modules() if is_differential(m)}
    return [found.get(i) for i in range(n_layer)] if found else []


def _probe_ids(tokenizer: BPETokenizer, T: int) -> list[int]:
    ids = tokenizer.encode_ids("The cat sat on the mat.")
    return (ids * T)[:T]


def _windows(cfg, n_layer: int) -> list[int | None]:
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
    ``"sqrt(head_dim) / mscale^2"`` (DeepSeek's MLA under YaRN, :func:`yarn_mscale`) whose value
    is the divisor the layer applied (``divisors``, from the probe), else
    ``"<divisor> (set by the model)"``."""
    qpas = getattr(cfg, "query_pre_attn_scalar", None)
    by_layer = bool(getattr(cfg, "scale_attn_by_inverse_layer_idx", False))
    mscale = yarn_mscale(cfg)
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


def _positions(cfg) -> str:
    if getattr(cfg, "model_type", "") == "gpt2":
        return "learned"
    if getattr(cfg, "rope_theta", None) or getattr(cfg, "rope_parameters", None) or getattr(cfg, "rotary_pct", None):
        return "rotary"
    return "other"


def preflight(path: Path):
    """What can be told without loading the weights: transformers present, a readable config of a
    decoder-only model, a tokenizer.json. Returns the config; :class:`CheckpointError` otherwise."""
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
    if getattr(cfg, "is_encoder_decoder", False):
        raise CheckpointError(
            f"{path} holds an encoder-decoder model ({cfg.model_type}); attnscope shows decoder-only causal LMs"
        )
    if not (path / "tokenizer.json").is_file():
        raise CheckpointError(f"no tokenizer.json in {path}: attnscope needs the fast tokenizer file beside the model")
    return cfg


def load_transformers_dir(path: Path, device: torch.device, dtype: str = "fp32", placement=None) -> TransformersBackend:
    """Open a local transformers causal-LM directory offline; :class:`CheckpointError` on anything it can't show.
    ``placement`` (:class:`model.registry.Placement`): accelerate spreads the layers (``device`` is then unused)."""
    cfg = preflight(path)
    from transformers import AutoModelForCausalLM

    register()
    tok_file = path / "tokenizer.json"
    placed = placement.kwargs() if placement is not None else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, attn_implementation=IMPLEMENTATION, dtype=DTYPES[dtype], **placed
        )
    except (ValueError, KeyError, RuntimeError) as e:
        raise CheckpointError(f"cannot open {path} as a causal LM: {' '.join(str(e).split())[:300]}") from e
    except OSError as e:
        raise CheckpointError(f"cannot read the weights in {path}: {' '.join(str(e).split())[:300]}") from e
    if placed:
        device = input_device(model.hf_device_map)
    try:
        if not placed:
            model.to(device)
    except torch.OutOfMemoryError as e:
        gib = parameter_count(model) * model.dtype.itemsize / 2**30
        raise CheckpointError(
            f"the model ({gib:.1f} GiB in {dtype}) does not fit on {device}; try --dtype bf16 or --device cpu"
        ) from e
    tokenizer = BPETokenizer.load(tok_file, bos_token=_bos_token(path, cfg))
    backend = TransformersBackend(model, tokenizer, device, name=path.name)
    backend.chat_template = with_chat(backend.facts, folder_template(path))
    if placed:
        backend.facts.devices = layer_devices(model, backend.facts.n_layer)
    return backend


def _bos_token(path: Path, cfg) -> str | None:
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
