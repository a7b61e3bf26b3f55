"""transformers' attention hook: every attention layer of any family, one named step at a time.

transformers looks a model's attention function up by name in ``AttentionInterface``; we
register :func:`attnscope_attention` under ``"attnscope"`` (and :func:`boolean_mask`, eager's
mask builder without its float step, under the same name in ``AttentionMaskInterface``), and
models are loaded with ``attn_implementation="attnscope"`` (:mod:`model.hf_backend`). Each
attention layer of every family then calls our function with what it computed itself: ``query``
and ``key`` after rotary embeddings, the model's own ``scaling`` (not always ``1/√head_dim``),
``softcap`` where a family has it, and a mask that already holds causality and any sliding
window. The function does eager attention's arithmetic (the same ``output_attentions``, to the
last bit in float32) one named step at a time and hands the steps to the sink of the running
call (:func:`model.trace.traced_attention`), found through a context variable set by
:func:`recording`, so concurrent calls never share one.

Learned attention sinks (gpt-oss pass ``s_aux``, one logit per head): the sink is one more
column of every row's softmax, then dropped, so a row of ``pattern`` sums to 1 − ``sink_mass``,
the weight the sink took; exactly as the model computes it, never renormalised.

Differential attention (DiffLlama) calls this function twice per layer: the first call is
recorded as pairs of softmaxes (:mod:`model.hf_differential`), the second runs unrecorded.

What-ifs: ``causal=False`` drops the mask (sliding windows with it), another divisor
replaces the model's; both are applied in every layer, as for our own model. Ablated heads'
outputs are replaced (:func:`~model.options.ablate_heads`) in the per-head output this function
returns, before the model's ``o_proj``.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from .hf_differential import differential_lambda, is_differential, pair_options, pair_steps
from .options import AttentionOptions, ablate_heads
from .trace import masked_scores, needs_unscaled, traced_attention, wants

IMPLEMENTATION = "attnscope"


@dataclass
class _Recording:
    sink: object
    opts: AttentionOptions
    masks: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # (transformers' mask, ours)
    gate_inputs: dict[int, torch.Tensor] = field(default_factory=dict)  # id(attention module) -> its q_proj output
    first_calls: set[int] = field(default_factory=set)  # differential modules whose second call comes next

    def second_call(self, module: torch.nn.Module) -> bool:
        """A differential module calls attention twice per forward pass: whether this is the second."""
        if id(module) in self.first_calls:
            self.first_calls.discard(id(module))
            return True
        self.first_calls.add(id(module))
        return False

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


def recording_active() -> bool:
    """Whether a :func:`recording` is running in this context (the notebook switches a model's
    attention implementation to ours only then)."""
    return _ACTIVE.get() is not None


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
    differential = is_differential(module)  # DiffLlama: pairs of query heads h, h + nh/2
    if differential:
        opts = pair_options(opts, nh // 2)
        if rec is not None and rec.second_call(module):
            sink = None  # the same queries and keys again, with the other half of the values: not recorded
    pattern = None
    sink_logit = kwargs.get("s_aux")  # (nh,) gpt-oss: a learned logit per head, a column of every row's softmax
    # multi-head latent attention (DeepSeek): q and k are [no-RoPE part | RoPE part]; q·kᵀ splits in two
    nope = getattr(module, "qk_nope_head_dim", None) if getattr(module, "qk_rope_head_dim", None) else None
    gate = output_gate(module, B, T, nh, hs)  # (B, nh, T) or None: Qwen3-Next's gate on each head's output
    extras = {"attn_scores_uncapped"} if softcap is not None else set()
    extras |= {"sink_mass"} if sink_logit is not None else set()
    extras |= {"attn_scores_content", "attn_scores_position"} if nope is not None else set()
    extras |= {"gate"} if gate is not None else set()
    extras |= {"pattern_parts"} if differential else set()

    def softmax(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, nh, t, s) scores -> the pattern (B, nh, t, s) and, with a sink, its weight (B, nh, t)."""
        if sink_logit is None:
            return F.softmax(scores, dim=-1, dtype=torch.float32), None
        column = sink_logit.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)  # (B, nh, t, 1)
        weights = F.softmax(torch.cat([scores, column], dim=-1), dim=-1, dtype=torch.float32)  # (B, nh, t, s + 1)
        return weights[..., :-1], weights[..., -1]  # the sink's column dropped, as the model does

    if softcap is None and sink_logit is None and not wants(sink, layer):  # (MLA's parts come only with the steps)
        # fast path: nothing of this layer is kept, so one fused kernel with the same mask and scale
        z = F.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=1.0 / divisor)  # (B, nh, T, hs)
    else:
        unscaled = sink is not None and needs_unscaled(sink)

        def steps(q0: int, q1: int, s: int) -> dict[str, torch.Tensor | None]:
            """Query rows q0..q1 over the first s keys: eager attention's arithmetic, step by step."""
            m = mask[q0:q1, :s]  # (t, s)
            attn_scores_raw = torch.matmul(query[:, :, q0:q1], k[:, :, :s].transpose(2, 3))  # (B, nh, t, s)
            content = position = None
            if nope is not None:  # the same product, its two halves apart: content + position = raw
                content = torch.matmul(query[:, :, q0:q1, :nope], k[:, :, :s, :nope].transpose(2, 3))  # (B, nh, t, s)
                position = torch.matmul(query[:, :, q0:q1, nope:], k[:, :, :s, nope:].transpose(2, 3))  # (B, nh, t, s)
            # the model's own scale: exactly eager's multiplication; a what-if divisor: a division
            uncapped = None
            if softcap is None and opts.divisor is None:
                attn_scores = masked_scores(attn_scores_raw, m, scaling=model_scaling)  # (B, nh, t, s)
            elif softcap is None:
                attn_scores = masked_scores(attn_scores_raw, m, divisor=divisor)  # (B, nh, t, s)
            else:
                uncapped = attn_scores_raw * model_scaling if opts.divisor is None else attn_scores_raw / divisor
                attn_scores = masked_scores(torch.tanh(uncapped / softcap) * softcap, m)  # (B, nh, t, s)
            pattern, sink_mass = softmax(attn_scores)  # (B, nh, t, s), (B, nh, t) or None
            pattern = pattern.to(query.dtype)
            z = torch.matmul(pattern, v[:, :, :s])  # (B, nh, t, s) @ (B, nh, s, hs) -> (B, nh, t, hs)
            pattern_unscaled = None
            if unscaled:
                raw = attn_scores_raw if softcap is None else torch.tanh(attn_scores_raw / softcap) * softcap
                pattern_unscaled = softmax(masked_scores(raw, m))[0]
            return dict(
                attn_scores_raw=attn_scores_raw,
                attn_scores_content=content,
                attn_scores_position=position,
                attn_scores_uncapped=uncapped,
                attn_scores=attn_scores,
                pattern=pattern,
                pattern_unscaled=pattern_unscaled,
                sink_mass=sink_mass,
                gate=None if gate is None else gate[:, :, q0:q1],
                z=z,
            )

        if sink is None:  # not recording (a plain forward pass of a softcapped model)
            st = steps(0, T, S)
            z, pattern = st["z"], st["pattern"]
        else:
            window = int(sliding_window) if sliding_window and opts.causal else None
            logits = None if sink_logit is None else sink_logit.detach().float()
            traced, heads = (query, k, v), None
            if differential:  # the pairs, described by their first query head; z stays every head's
                traced = (query[:, : nh // 2], k[:, : nh // 2], v[:, : nh // 2])
                steps = pair_steps(steps, nh // 2, differential_lambda(module))
                heads = 5 * (nh // 2)  # a block holds every query head's steps, the pairs' two parts and the signed map
            z = traced_attention(
                sink, layer, *traced, mask, divisor, steps, opts.causal, softcap, window, sink_logit=logits,
                extras=frozenset(extras), heads=heads,
            )

    z = ablate_heads(z, layer, opts)  # switched-off heads, before o_proj
    return z.transpose(1, 2).contiguous(), pattern  # (B, T, nh, hs), as transformers expects


def watch_output_gates(model: torch.nn.Module) -> int:
    """Qwen3-Next's gated attention: ``q_proj`` makes each head's query and a gate of the same size
    side by side; after the attention function the head's output is multiplied by sigmoid(gate),
    outside anything the attention function sees. A forward hook on each such ``q_proj`` leaves its
    output with the running :func:`recording` (one per request, so concurrent requests never see
    each other's) for :func:`output_gate`. Returns how many layers are gated."""
    n = 0
    for module in model.modules():
        q_proj, o_proj = getattr(module, "q_proj", None), getattr(module, "o_proj", None)
        head_dim = getattr(module, "head_dim", None)
        if q_proj is None or o_proj is None or not head_dim or not hasattr(q_proj, "out_features"):
            continue
        if q_proj.out_features != 2 * o_proj.in_features:  # a query and a gate per head
            continue
        q_proj.register_forward_hook(lambda _m, _inp, out, owner=module: _keep_gate_input(owner, out))
        n += 1
    return n


def _keep_gate_input(module: torch.nn.Module, out: torch.Tensor) -> None:
    rec = _ACTIVE.get()
    if rec is not None:
        rec.gate_inputs[id(module)] = out


def output_gate(module: torch.nn.Module, B: int, T: int, nh: int, hs: int) -> torch.Tensor | None:
    """(B, nh, T): each head's output gate at each query, sigmoid averaged over the head's dimensions;
    None for a layer without one. Taken (and let go) from what :func:`watch_output_gates` left."""
    rec = _ACTIVE.get()
    out = rec.gate_inputs.pop(id(module), None) if rec is not None else None
    if out is None:
        return None
    logits = out.view(B, T, nh, 2 * hs)[..., hs:]  # (B, T, nh, hs): the gate half of each head's projection
    return torch.sigmoid(logits.float()).mean(-1).transpose(1, 2)  # (B, nh, T)


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
