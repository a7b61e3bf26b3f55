"""Any local transformers causal LM, every step of its attention recorded.

transformers looks a model's attention function up by name in ``AttentionInterface``; we
register :func:`attnscope_attention` under ``"attnscope"`` (and :func:`boolean_mask`, eager's
mask builder without its float step, under the same name in ``AttentionMaskInterface``) and load models with
``attn_implementation="attnscope"``. Each attention layer of every family then calls our
function with what it computed itself: ``query`` and ``key`` after rotary embeddings, the
model's own ``scaling`` (not always ``1/√head_dim``), ``softcap`` where a family has it,
and a mask that already holds causality and any sliding window. The function does eager
attention's arithmetic (the same ``output_attentions``, to the last bit in float32) one named
step at a time and appends the :class:`~model.gpt.AttentionTrace` to the sink of the running
call, found through a context variable, so concurrent calls never share one.

What-ifs: ``causal=False`` drops the mask (sliding windows with it), another divisor
replaces the model's; both are applied in every layer, as for our own model. Ablated heads'
outputs are replaced (:func:`~model.gpt.ablate_heads`) in the per-head output this function
returns, before the model's ``o_proj``.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.nn import functional as F

from .backends import DTYPES, ModelFacts, parameter_count
from .checkpoint import CheckpointError
from .gpt import AttentionOptions, AttentionTrace, ablate_heads, masked_scores, needs_unscaled, traced_attention, wants
from .precision import exact_fp32
from .tokenizer import BPETokenizer

log = logging.getLogger(__name__)

IMPLEMENTATION = "attnscope"


@dataclass
class _Recording:
    sink: object
    opts: AttentionOptions
    masks: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # (transformers' mask, ours)

    def mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """(T, S) bool from transformers' mask, made once per mask tensor: the layers of a forward
        pass share one or two (full and sliding), so the capture sees the same tensor again."""
        for seen, ours in self.masks:
            if seen is attention_mask:
                return ours
        ours = _bool_mask(attention_mask)
        self.masks.append((attention_mask, ours))
        return ours


def _bool_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    if attention_mask.dtype == torch.bool:
        return attention_mask[0, 0]  # (T, S)
    return attention_mask[0, 0] == 0  # eager's additive mask: 0 where visible, the dtype's minimum elsewhere


_ACTIVE: contextvars.ContextVar[_Recording | None] = contextvars.ContextVar("attnscope_recording", default=None)


@contextlib.contextmanager
def recording(sink, opts: AttentionOptions):
    """Within this block, attention layers append their traces to ``sink`` and apply ``opts``."""
    token = _ACTIVE.set(_Recording(sink, opts))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def attnscope_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    sliding_window: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention, one named step at a time; the signature transformers calls."""
    rec = _ACTIVE.get()
    opts = rec.opts if rec is not None else AttentionOptions()
    B, nh, T, hs = query.shape  # (B, nh, T, hs)
    n_rep = nh // key.shape[1]
    k = key.repeat_interleave(n_rep, dim=1) if n_rep > 1 else key  # (B, n_kv, S, hs) -> (B, nh, S, hs)
    v = value.repeat_interleave(n_rep, dim=1) if n_rep > 1 else value  # (B, nh, S, hs)
    S = k.shape[2]

    model_scaling = hs**-0.5 if scaling is None else float(scaling)
    if opts.causal:
        if attention_mask is None:
            mask = torch.ones(T, S, dtype=torch.bool, device=query.device)
        else:
            mask = rec.mask(attention_mask) if rec is not None else _bool_mask(attention_mask)  # (T, S)
    else:
        mask = torch.ones(T, S, dtype=torch.bool, device=query.device)

    divisor = 1.0 / model_scaling if opts.divisor is None else float(opts.divisor)
    layer = int(getattr(module, "layer_idx", 0) or 0)
    sink = rec.sink if rec is not None else None
    pattern = None

    if softcap is None and not wants(sink, layer):
        # fast path: nothing of this layer is kept, so one fused kernel with the same mask and scale
        z = F.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=1.0 / divisor)  # (B, nh, T, hs)
    else:
        unscaled = sink is not None and needs_unscaled(sink)

        def steps(q0: int, q1: int, s: int) -> dict[str, torch.Tensor | None]:
            """Query rows q0..q1 over the first s keys: eager attention's arithmetic, step by step."""
            m = mask[q0:q1, :s]  # (t, s)
            attn_scores_raw = torch.matmul(query[:, :, q0:q1], k[:, :, :s].transpose(2, 3))  # (B, nh, t, s)
            # the model's own scale: exactly eager's multiplication; a what-if divisor: a division
            uncapped = None
            if softcap is None and opts.divisor is None:
                attn_scores = masked_scores(attn_scores_raw, m, scaling=model_scaling)  # (B, nh, t, s)
            elif softcap is None:
                attn_scores = masked_scores(attn_scores_raw, m, divisor=divisor)  # (B, nh, t, s)
            else:
                uncapped = attn_scores_raw * model_scaling if opts.divisor is None else attn_scores_raw / divisor
                attn_scores = masked_scores(torch.tanh(uncapped / softcap) * softcap, m)  # (B, nh, t, s)
            pattern = F.softmax(attn_scores, dim=-1, dtype=torch.float32).to(query.dtype)  # (B, nh, t, s)
            z = torch.matmul(pattern, v[:, :, :s])  # (B, nh, t, s) @ (B, nh, s, hs) -> (B, nh, t, hs)
            pattern_unscaled = None
            if unscaled:
                raw = attn_scores_raw if softcap is None else torch.tanh(attn_scores_raw / softcap) * softcap
                pattern_unscaled = F.softmax(masked_scores(raw, m), dim=-1, dtype=torch.float32)
            return dict(
                attn_scores_raw=attn_scores_raw,
                attn_scores_uncapped=uncapped,
                attn_scores=attn_scores,
                pattern=pattern,
                pattern_unscaled=pattern_unscaled,
                z=z,
            )

        if sink is None:  # not recording (a plain forward pass of a softcapped model)
            st = steps(0, T, S)
            z, pattern = st["z"], st["pattern"]
        else:
            window = int(sliding_window) if sliding_window and opts.causal else None
            z = traced_attention(
                sink, layer, query, k, v, mask, divisor, steps, causal=opts.causal, softcap=softcap, window=window
            )

    z = ablate_heads(z, layer, opts)  # switched-off heads, before o_proj
    return z.transpose(1, 2).contiguous(), pattern  # (B, T, nh, hs), as transformers expects


_registered = False


def register() -> None:
    """Make ``attn_implementation="attnscope"`` known to transformers (once per process)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, attnscope_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, boolean_mask)
    _registered = True


def boolean_mask(*args, **kwargs) -> torch.Tensor | None:
    """The mask transformers builds for eager attention, before eager turns it into floats:
    ``(B, 1, T, S)`` bool, True where the query may attend, with causality, sliding windows and
    padding in it. One byte a cell instead of four (4 GB of float32 at 32k tokens), and nothing
    to convert back. Never skipped for a causal mask (``allow_is_causal_skip=False``, as eager)."""
    from transformers.masking_utils import sdpa_mask

    kwargs.pop("dtype", None)
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


class _Probe(list):
    """A sink for the load-time probe: layer facts only."""

    needs_unscaled = False


class TransformersBackend:
    """A transformers ``AutoModelForCausalLM`` with every attention layer recorded."""

    def __init__(self, model: torch.nn.Module, tokenizer: BPETokenizer, device: torch.device, name: str):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = device
        cfg = model.config
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
        first = probe[0]
        n_head, head_dim = int(first.q.shape[1]), int(first.q.shape[-1])
        d_model = int(getattr(cfg, "hidden_size", 0) or n_head * head_dim)
        n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_head)
        windows = _windows(cfg, len(probe))
        divisors = {round(t.divisor, 6) for t in probe}
        rule = _divisor_rule(cfg, head_dim, first.divisor)
        if len(divisors) > 1:
            rule = "per layer: " + rule
        self.layer_divisors = [t.divisor for t in probe]
        self.facts = ModelFacts(
            name=name,
            family=self.family,
            n_layer=len(probe),
            n_head=n_head,
            n_kv_head=n_kv,
            head_dim=head_dim,
            d_model=d_model,
            divisor=first.divisor,
            divisor_rule=rule,
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
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        if not logits:
            self.model.base_model(input_ids=idx, use_cache=False)
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
            return self.model.base_model(input_ids=idx, use_cache=False).last_hidden_state[0]

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """(n, C) -> logits (n, V), with the output scaling a family applies after its LM head."""
        cfg = self.model.config
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
            self.model.base_model(input_ids=idx.to(self.device), use_cache=False)
        return torch.stack([t.pattern for t in trace], dim=1).float().cpu()  # (B, L, nh, T, T)


    @torch.inference_mode()
    @exact_fp32()
    def last_logits(self, idx: torch.Tensor, opts: AttentionOptions) -> torch.Tensor:
        """Token ids ``(B, T)`` -> the logits after the last position ``(B, V)``, float32 (head effects)."""
        with recording(_Discard(), opts):
            h = self.model.base_model(input_ids=idx.to(self.device), use_cache=False).last_hidden_state
        return self.head(h[:, -1]).float()

    def start_generation(self) -> object:
        """A fresh transformers cache for :meth:`step`."""
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    @torch.inference_mode()
    @exact_fp32()
    def step(self, ids: list[int], cache, opts: AttentionOptions) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Generation: the tokens after those in ``cache`` -> logits after the last one ``(V,)`` and
        each layer's pattern row of that last token ``(nh, S)`` over every token so far (keys a
        sliding window dropped from the cache: weight 0)."""
        start = cache.get_seq_length()
        idx = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T_new)
        rows = _Rows()
        with recording(rows, opts):
            out = self.model(input_ids=idx, past_key_values=cache, use_cache=True, logits_to_keep=1)
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


def _divisor_rule(cfg, head_dim: int, divisor: float) -> str:
    if math.isclose(divisor, math.sqrt(head_dim), rel_tol=1e-6):
        return "sqrt(head_dim)"
    qpas = getattr(cfg, "query_pre_attn_scalar", None)
    if qpas and math.isclose(divisor, math.sqrt(qpas), rel_tol=1e-6):
        return "sqrt(query_pre_attn_scalar)"
    return f"{divisor:g} (set by the model)"


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


def load_transformers_dir(path: Path, device: torch.device, dtype: str = "fp32") -> TransformersBackend:
    """Open a local transformers causal-LM directory offline; :class:`CheckpointError` on anything it can't show."""
    cfg = preflight(path)
    from transformers import AutoModelForCausalLM

    register()
    tok_file = path / "tokenizer.json"
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, attn_implementation=IMPLEMENTATION, dtype=DTYPES[dtype]
        )
    except ValueError as e:
        raise CheckpointError(f"cannot open {path} as a causal LM: {' '.join(str(e).split())[:300]}") from e
    except OSError as e:
        raise CheckpointError(f"cannot read the weights in {path}: {' '.join(str(e).split())[:300]}") from e
    try:
        model.to(device)
    except torch.OutOfMemoryError as e:
        gib = parameter_count(model) * model.dtype.itemsize / 2**30
        raise CheckpointError(
            f"the model ({gib:.1f} GiB in {dtype}) does not fit on {device}; try --dtype bf16 or --device cpu"
        ) from e
    tokenizer = BPETokenizer.load(tok_file, bos_token=_bos_token(path, cfg))
    return TransformersBackend(model, tokenizer, device, name=path.name)


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
