"""Any local transformers causal LM as a backend: loading it, what it is, running it recorded.

:func:`load_transformers_dir` opens a model directory offline with
``attn_implementation="attnscope"``, so that every attention layer calls our function
(:mod:`model.families.attention`). :class:`TransformersBackend` then runs it inside
:func:`~model.families.attention.recording` and tells its facts (:class:`~model.backends.ModelFacts`)
from one short probe pass: each layer's divisor, softcap and sliding window as the model
applies them, with each divisor named from the config (:func:`~model.families.config.layer_divisor_rules`:
what the config says is read in :mod:`model.families.config`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

from ..backends import DTYPES, ModelFacts, parameter_count
from ..blocks import block_budget
from ..chat import folder_template, with_chat
from ..options import AttentionOptions
from ..ours.checkpoint import CheckpointError
from ..ours.tokenizer import BPETokenizer
from ..placement import input_device, layer_devices
from ..precision import exact_fp32
from ..trace import AttentionTrace
from .attention import IMPLEMENTATION, recording, register, watch_output_gates
from .config import bos_token, layer_divisor_rules, layer_types, position_encoding, preflight, sliding_windows
from .differential import differential_lambda, is_differential
from .implicit import install_mixers, mark_mixers, recording_scans
from .implicit_layer import implicit_layer
from .mrope import mrope_positions


class _Probe(list):
    """A sink for the load-time probe: layer facts only."""

    needs_unscaled = False


class TransformersBackend:
    """A transformers ``AutoModelForCausalLM`` with every attention layer recorded."""

    architecture = "decoder"  # ModelFacts.architecture; an encoder: model.families.encoder.EncoderBackend
    auto_class = "AutoModelForCausalLM"  # the transformers class that opens such a folder
    calls = {"use_cache": False}  # what every forward pass of the trunk is also given

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
        windows = sliding_windows(cfg, n_layer)
        by_number = {t.layer: t for t in probe}
        divisors = [by_number[i].divisor if i in by_number else None for i in range(n_layer)]
        install_mixers(model, numbers)  # an implicit head switched off as a softmax head is (ablate)
        self.facts = ModelFacts(
            name=name,
            family=self.family,
            n_layer=n_layer,
            attention_layers=numbers,
            layers=mark_mixers(model, layer_types(cfg, n_layer, numbers, windows), numbers),
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
            positions=position_encoding(cfg),
            parameters=parameter_count(model),
            dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
            device=str(device),
            softcap=first.softcap,
            sliding_window=windows,
            bos_token=tokenizer.tk.id_to_token(tokenizer.bos_id) if tokenizer.bos_id is not None else None,
            architecture=self.architecture,
        )

    def run_ids(self, ids: list[int], logits: bool) -> torch.Tensor | None:
        """Token ids through the model (recorded by whatever :func:`recording` is running): logits
        ``(T, V)``, or ``None`` with ``logits=False`` (the LM head skipped)."""
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        if not logits:
            self.trunk(input_ids=idx, **self.calls)
            return None
        return self.model(input_ids=idx, **self.calls).logits[0]  # (T, V)

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
        wanted = getattr(getattr(sink, "sel", None), "implicit", ())
        if not wanted:
            with recording(sink, opts):
                return self.trunk(input_ids=idx, **self.calls).last_hidden_state[0]
        with recording(sink, opts), recording_scans(self.model) as scans:
            hidden = self.trunk(input_ids=idx, **self.calls).last_hidden_state[0]
        budget = sink.sel.budget_bytes or block_budget(self.device)
        sel = sink.sel
        sink.implicit = [
            implicit_layer(scans[layer], budget, "pattern" in sel.fields, sel.thumbnail, sel.stats) for layer in wanted
        ]
        return hidden

    @classmethod
    def tokenizer_of(cls, path: Path, cfg) -> BPETokenizer:
        """The folder's tokenizer.json, with the BOS the model was trained with."""
        return BPETokenizer.load(path / "tokenizer.json", bos_token=bos_token(path, cfg))

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
            self.trunk(input_ids=idx.to(self.device), **self.calls)
        return torch.stack([t.pattern for t in trace], dim=1).float().cpu()  # (B, L, nh, T, T)

    @torch.inference_mode()
    @exact_fp32()
    def last_logits(self, idx: torch.Tensor, opts: AttentionOptions, at: int = -1, **inputs) -> torch.Tensor:
        """Token ids ``(B, T)`` -> the logits after the last position (or position ``at``) ``(B, V)``,
        float32 (head effects); ``inputs``: what else the model reads (an image-text model's ``pixel_values``)."""
        with recording(_Discard(), opts):
            h = self.trunk(input_ids=idx.to(self.device), **self.calls, **inputs).last_hidden_state
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


def load_transformers_dir(
    path: Path, device: torch.device, dtype: str = "fp32", placement=None, kind: type[TransformersBackend] | None = None
) -> TransformersBackend:
    """Open a local transformers causal-LM directory offline; :class:`CheckpointError` on anything it can't show.
    ``placement`` (:class:`model.registry.Placement`): accelerate spreads the layers (``device`` is then unused).
    ``kind``: the backend class, which names the transformers class that opens the folder (an encoder's)."""
    kind = kind or TransformersBackend
    cfg = preflight(path, seq2seq=kind.architecture == "encoder-decoder")
    import transformers

    register()
    placed = placement.kwargs() if placement is not None else {}
    try:
        model = getattr(transformers, kind.auto_class).from_pretrained(
            path, local_files_only=True, attn_implementation=IMPLEMENTATION, dtype=DTYPES[dtype], **placed
        )
    except (ValueError, KeyError, RuntimeError) as e:
        what = {"encoder": "a masked LM", "encoder-decoder": "an encoder-decoder"}.get(kind.architecture, "a causal LM")
        raise CheckpointError(f"cannot open {path} as {what}: {' '.join(str(e).split())[:300]}") from e
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
    backend = kind(model, kind.tokenizer_of(path, cfg), device, name=path.name)
    backend.chat_template = with_chat(backend.facts, folder_template(path))
    if placed:
        backend.facts.devices = layer_devices(model, backend.facts.n_layer)
    return backend
