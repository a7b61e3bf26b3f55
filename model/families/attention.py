"""transformers' attention hook: every attention layer of any family, one named step at a time.

transformers looks a model's attention function up by name in ``AttentionInterface``; we
register :func:`attnscope_attention` under ``"attnscope"`` (and :func:`boolean_mask`, eager's
mask builder without its float step, under the same name in ``AttentionMaskInterface``), and
models are loaded with ``attn_implementation="attnscope"`` (:mod:`model.families.backend`). Each
attention layer of every family then calls our function with what it computed itself: ``query``
and ``key`` after rotary embeddings, the model's own ``scaling`` (not always ``1/√head_dim``),
``softcap`` where a family has it, and a mask that already holds causality and any sliding
window. The function does eager attention's arithmetic (the same ``output_attentions``, to the
last bit in float32) one named step at a time and hands the steps to the sink of the running
call (:func:`model.trace.traced_attention`), found through a context variable set by
:func:`recording`, so concurrent calls never share one.

What a family adds (a softcap, learned sinks, MLA's two parts of q·kᵀ, output gates, differential
attention's pairs) is one module each in :mod:`model.families`; this function builds the mask and
the scale, sees which of them a layer has, and chooses the fused kernel or the named steps.
Differential attention (DiffLlama) calls this function twice per layer: the first call is
recorded as pairs of softmaxes (:mod:`model.families.differential`), the second runs unrecorded.

What-ifs: ``causal=False`` drops the mask (sliding windows with it), another divisor
replaces the model's; both are applied in every layer, as for our own model. Ablated heads'
outputs are replaced (:func:`~model.options.ablate_heads`) in the per-head output this function
returns, before the model's ``o_proj``. Knocked-out edges (attention knockout) leave the mask the
model built through :meth:`~model.options.AttentionOptions.knocked_mask`, as in our own GPT.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from ..options import AttentionOptions, ablate_heads
from ..trace import needs_unscaled, sees_later, traced_attention, wants
from . import Features, differential, eager_steps, gates, merged, mla

IMPLEMENTATION = "attnscope"


@dataclass
class _Recording:
    sink: object
    opts: AttentionOptions
    masks: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # (transformers' mask, ours)
    later: list[tuple[torch.Tensor, bool]] = field(default_factory=list)  # (ours, whether it sees later keys)
    triangles: list[tuple[torch.Tensor, bool]] = field(default_factory=list)  # (ours, whether it is the causal one)
    gate_inputs: dict[int, torch.Tensor] = field(default_factory=dict)  # id(attention module) -> its q_proj output
    first_calls: set[int] = field(default_factory=set)  # differential modules whose second call comes next
    unnumbered: int = 0  # calls so far from modules without a layer_idx (DistilBERT; ALBERT's one shared layer)
    # an encoder-decoder's stacks (model.families.seq2seq.Places): which stack and layer each attention
    # module is; only the calls of ``stack`` are recorded and take the what-ifs, the others run as trained
    places: object | None = None
    stack: str | None = None
    others: dict = field(default_factory=dict)  # another stack's name -> a sink its calls go to, as trained
    cross_keys: dict[int, int] = field(default_factory=dict)  # id(merged module) -> the source's length (T5Gemma 2)

    def records(self, module: torch.nn.Module) -> bool:
        """Whether this module's call is of the stack looked at (every call, in a model of one stack)."""
        return self.places is None or self.places.in_stack(module, self.stack)

    def sink_of(self, module: torch.nn.Module):
        """Where this module's call goes: the sink, or (another stack's) its own sink in ``others``, or None."""
        if self.records(module):
            return self.sink
        return self.others.get(self.places.stack_of(module))

    def number(self, module: torch.nn.Module) -> int:
        """The layer's number: its place in its stack, else its module's ``layer_idx``, else its place among
        this pass's calls."""
        if self.places is not None:
            return self.places.layer_of(module)
        idx = getattr(module, "layer_idx", None)
        if idx is not None:
            return int(idx)
        self.unnumbered += 1
        return self.unnumbered - 1

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
        return _once(self.masks, attention_mask, _bool_mask)

    def sees_later(self, mask: torch.Tensor) -> bool:
        """:func:`model.trace.sees_later`, asked once per mask tensor of a forward pass (not once a layer)."""
        return _once(self.later, mask, sees_later)

    def causal_only(self, mask: torch.Tensor) -> bool:
        """Whether a (T, T) mask is the causal triangle and nothing else, asked once per mask tensor: the fast
        path then runs SDPA's causal kernel (on the CPU twice as fast as with the mask, and bitwise the same)."""
        return _once(self.triangles, mask, _triangle)


def _once(memo: list, tensor: torch.Tensor, compute):
    """``compute(tensor)``, computed once per tensor object and kept in ``memo`` as (tensor, value)."""
    for seen, value in memo:
        if seen is tensor:
            return value
    value = compute(tensor)
    memo.append((tensor, value))
    return value


def _triangle(mask: torch.Tensor) -> bool:
    return mask.shape[0] == mask.shape[1] and torch.equal(mask, mask.new_ones(mask.shape).tril())


def _bool_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    if attention_mask.dtype == torch.bool:
        return attention_mask[0, 0]  # (T, S)
    return attention_mask[0, 0] == 0  # eager's additive mask: 0 where visible, the dtype's minimum elsewhere


_ACTIVE: contextvars.ContextVar[_Recording | None] = contextvars.ContextVar("attnscope_recording", default=None)


def current() -> _Recording | None:
    """The running :func:`recording` of this context (its sink, options and layer numbering), or None: for
    a family that computes attention in its own module (:mod:`model.families.deberta`)."""
    return _ACTIVE.get()


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


@contextlib.contextmanager
def stacked(places, stack: str, others: dict | None = None):
    """Within a :func:`recording`, only the calls of ``stack`` (by ``places``, an encoder-decoder's
    :class:`~model.families.seq2seq.Places`) are recorded and take the what-ifs; ``others``: another
    stack's sink, which its calls (run as trained) go to (generation's cross rows); outside one, nothing."""
    rec = _ACTIVE.get()
    if rec is None:
        yield
        return
    before = rec.places, rec.stack, rec.others
    rec.places, rec.stack, rec.others = places, stack, others or {}
    try:
        yield
    finally:
        rec.places, rec.stack, rec.others = before


PRESCALED = ("WhisperAttention",)  # modules that multiply q by their scale themselves, then call with 1.0


def _prescaled(module: torch.nn.Module, query: torch.Tensor, scaling: float | None) -> tuple[torch.Tensor, float]:
    """Whisper multiplies q by ``module.scaling`` (head_dim^-0.5) and calls with ``scaling=1.0``: q as projected
    and that scale given back to the call, so that q, the raw scores and the divisor mean what they mean in every
    other family (the scaling view's d_k). Only for a power of two (Whisper's head_dim 64 gives 1/8), where the
    division here and the multiplication after q·kᵀ are exact: the pattern stays bit-equal to eager's."""
    pre = float(getattr(module, "scaling", 1.0))
    if type(module).__name__ not in PRESCALED or scaling != 1.0 or pre == 1.0 or math.frexp(pre)[0] != 0.5:
        return query, scaling
    return query / pre, pre


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
    own = rec is not None and rec.records(module)  # a call of the stack looked at
    opts = rec.opts if own else AttentionOptions()
    B, nh, T, hs = query.shape  # (B, nh, T, hs)
    query, scaling = _prescaled(module, query, scaling)  # Whisper's q, as projected, and its scale
    n_rep = nh // key.shape[1]
    k = key.repeat_interleave(n_rep, dim=1) if n_rep > 1 else key  # (B, n_kv, S, hs) -> (B, nh, S, hs)
    v = value.repeat_interleave(n_rep, dim=1) if n_rep > 1 else value  # (B, nh, S, hs)
    S = k.shape[2]
    mask = _layer_mask(rec, opts, attention_mask, T, S, query.device)  # (T, S)
    model_scaling = hs**-0.5 if scaling is None else float(scaling)
    divisor = 1.0 / model_scaling if opts.divisor is None else float(opts.divisor)
    layer = rec.number(module) if rec is not None else int(getattr(module, "layer_idx", 0) or 0)
    sink = rec.sink_of(module) if rec is not None else None
    f = Features(
        softcap=softcap,
        sink_logit=kwargs.get("s_aux"),  # (nh,) gpt-oss: a learned logit per head
        nope=mla.nope_dim(module),
        gate=output_gate(module, B, T, nh, hs),  # (B, nh, T) or None
        differential=differential.is_differential(module),  # DiffLlama: pairs of query heads h, h + nh/2
        bias=_bias(kwargs.get("position_bias"), T, S),  # T5: a learned bias per head and relative position
    )
    if rec is not None and rec.places is not None and merged.is_merged(module):  # T5Gemma 2: two blocks, one softmax
        what_if = opts.divisor is not None  # as below: the model's own scale multiplies, a what-if divides
        scale = dict(scaling=None if what_if else model_scaling, divisor=divisor if what_if else None)
        scale["divisor_value"] = divisor
        z = merged.attend(rec, module, query, k, v, mask, opts, layer, f, scale, own)
        return ablate_heads(z, layer, opts).transpose(1, 2).contiguous(), None
    if f.differential:
        opts = differential.pair_options(opts, nh // 2)
        if rec is not None and rec.second_call(module):
            sink = None  # the same queries and keys again, with the other half of the values: not recorded

    pattern = None
    edited = opts.knocked_mask(layer, mask, nh)  # (T, S), or (nh, T, S) with edges knocked out
    upstream = rec is not None and not own  # another stack of an encoder-decoder: eager's arithmetic, unrecorded
    if not f.eager_only and not upstream and not wants(sink, layer):  # (MLA's parts come only with the steps)
        # fast path: nothing of this layer is kept, so one fused kernel with the same mask and scale
        allowed = edited if f.bias is None else f.bias.masked_fill(~edited, float("-inf"))  # (B|1, nh, T, S)
        causal = allowed is mask and rec is not None and rec.causal_only(mask)
        z = F.scaled_dot_product_attention(
            query, k, v, attn_mask=None if causal else allowed, is_causal=causal, scale=1.0 / divisor
        )  # (B, nh, T, hs)
    else:
        # the model's own scale: exactly eager's multiplication; a what-if divisor: a division
        scale = (
            dict(scaling=model_scaling, divisor=None) if opts.divisor is None else dict(scaling=None, divisor=divisor)
        )
        steps = eager_steps(query, k, v, edited, f, **scale, unscaled=sink is not None and needs_unscaled(sink, layer))
        if sink is None:  # not recording (a plain forward pass of a softcapped model)
            st = steps(0, T, S)
            z, pattern = st["z"], st["pattern"]
        else:
            traced, heads = (query, k, v), None
            if f.differential:  # the pairs, described by their first query head; z stays every head's
                steps, traced, heads = differential.recorded(module, steps, query, k, v)
            window = int(sliding_window) if sliding_window and opts.causal else None
            logits = None if f.sink_logit is None else f.sink_logit.detach().float()
            causal = opts.causal and not (rec.sees_later(mask) if rec is not None else sees_later(mask))
            z = traced_attention(
                sink, layer, *traced, mask, divisor, steps, causal, softcap, window, sink_logit=logits,
                extras=f.extras, heads=heads,
            )

    z = ablate_heads(z, layer, opts)  # switched-off heads, before o_proj
    return z.transpose(1, 2).contiguous(), pattern  # (B, T, nh, hs), as transformers expects


def _bias(position_bias: torch.Tensor | None, T: int, S: int) -> torch.Tensor | None:
    """T5's position bias ``(B|1, nh, T, S)`` added to the scaled scores; None where a layer has none or it is
    all zeros (T5's cross-attention and its layers without a bias of their own pass zeros)."""
    if position_bias is None or not position_bias.any():
        return None
    return position_bias[..., -T:, -S:]


def _layer_mask(rec, opts: AttentionOptions, attention_mask, T: int, S: int, device) -> torch.Tensor:
    """(T, S) bool, True where a query may attend: transformers' mask, or none at all (``causal=False``)."""
    if not opts.causal or attention_mask is None:
        return torch.ones(T, S, dtype=torch.bool, device=device)
    return rec.mask(attention_mask) if rec is not None else _bool_mask(attention_mask)


def watch_output_gates(model: torch.nn.Module) -> int:
    """Qwen3-Next's gated attention (:mod:`model.families.gates`): each gated layer's ``q_proj``
    output is left with the running :func:`recording` (one per request, so concurrent requests
    never see each other's) for :func:`output_gate`. Returns how many layers are gated."""
    return gates.watch(model, _keep_gate_input)


def watch_merged(model: torch.nn.Module) -> int:
    """T5Gemma 2's merged attention (:mod:`model.families.merged`): each merged module's source length is left
    with the running :func:`recording` before its call. Returns how many modules are merged."""
    return merged.watch(model, _keep_cross_keys)


def _keep_cross_keys(module: torch.nn.Module, n: int) -> None:
    rec = _ACTIVE.get()
    if rec is not None:
        rec.cross_keys[id(module)] = n


def _keep_gate_input(module: torch.nn.Module, out: torch.Tensor) -> None:
    rec = _ACTIVE.get()
    if rec is not None:
        rec.gate_inputs[id(module)] = out


def output_gate(module: torch.nn.Module, B: int, T: int, nh: int, hs: int) -> torch.Tensor | None:
    """(B, nh, T): each head's output gate at each query; None for a layer without one. Taken (and
    let go) from what :func:`watch_output_gates` left."""
    rec = _ACTIVE.get()
    out = rec.gate_inputs.pop(id(module), None) if rec is not None else None
    return None if out is None else gates.gate_of(out, B, T, nh, hs)


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
