"""Each component's write into the residual stream, at chosen positions, for any backend.

The residual stream after the last block is a sum of what was written into it:

* ``embed``: the token (and learned position) embeddings, as the first block reads them (Gemma's
  ``√d`` factor included);
* each head's write: its slice of the output projection's input (``z``, the pattern applied to
  ``v``, any ``v`` bias and sink included) times its slice of the projection's weight, and through
  the post-attention norm where a family has one (Gemma 2), its scale frozen;
* each MLP's write: what the block added after its attention (a MoE layer is one MLP; Gemma 2's
  post-feedforward norm included);
* ``bias``: each output projection's bias (through the frozen post-attention norm where there is one);
* on a hybrid (:data:`HYBRIDS`, with ``mixers=True``), each mixer layer's write: what its mixer module
  added to the residual stream, one component, not split per head (Bamba's gated norm before
  ``out_proj`` normalises a group of heads together; Jamba's Mamba-1 is per channel).

:func:`parts_of` finds those modules in our GPT and in the transformers families where the split is
exact, or raises :class:`~model.causal.NotSplittable` naming what is not; :func:`capture` runs the
model once through the backend's own ``run`` (the explicit path that ``/api/attention`` serves)
with hooks that keep the needed activations at the chosen positions only, and checks that the
parts add up to the residual stream the model computed.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..options import AttentionOptions
from ..placement import resident
from . import NotSplittable
from .norms import CHECK_RTOL, freeze

# transformers families whose blocks are split here (tests/model/test_causal_*.py check each against hooks)
FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma2", "gpt_oss")
# hybrids whose softmax layers are split as above and whose other layers add their mixer's output to the
# residual stream as it is (tests/model/causal/test_attribution_hybrid.py checks each against hooks)
HYBRIDS = {"bamba": "mamba", "jamba": "mamba"}  # family -> the block's mixer attribute


@dataclass
class LayerParts:
    """One block's modules, as the model names them."""

    block: torch.nn.Module
    attn: torch.nn.Module | None  # None on a mixer layer
    o_proj: torch.nn.Module | None
    norm_in: torch.nn.Module  # the attention's (or mixer's) input norm
    post_attn: torch.nn.Module | None  # a norm on the attention's output before the residual add (Gemma 2)
    # Wq, bq, Wk, bk; None on a mixer layer
    qk: Callable[[], tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]] | None
    q_norm: torch.nn.Module | None = None  # QK-norm over each head's dimensions (Qwen3)
    k_norm: torch.nn.Module | None = None
    rope: Callable | None = None  # the family's apply_rotary_pos_emb(q, k, cos, sin)
    mixer: torch.nn.Module | None = None  # a hybrid's mixer module, whose output the block adds to the residual
    mixer_name: str | None = None  # its kind, as /api/model's layers name it (``mamba2``)


@dataclass
class Parts:
    layers: list[LayerParts]
    final_norm: torch.nn.Module
    unembed: torch.nn.Module
    n_head: int
    n_kv_head: int
    head_dim: int  # of q and k
    final_softcap: float | None = None  # applied after the LM head (Gemma 2): the logits attributed are before it


def weight(module: torch.nn.Module) -> torch.Tensor:
    """A projection's weight as ``(out, in)``: nn.Linear's, or transformers' Conv1D (GPT-2) transposed."""
    w = resident(module, "weight")
    return w if isinstance(module, torch.nn.Linear) else w.T


def _bias(module: torch.nn.Module) -> torch.Tensor | None:
    return resident(module, "bias")


def _fused_qk(c_attn: torch.nn.Module, C: int):
    """Wq, bq, Wk, bk of a fused q, k, v projection (GPT-2's c_attn)."""

    def qk():
        w, b = weight(c_attn), _bias(c_attn)
        return w[:C], None if b is None else b[:C], w[C : 2 * C], None if b is None else b[C : 2 * C]

    return qk


def _split_qk(attn: torch.nn.Module):
    def qk():
        return weight(attn.q_proj), _bias(attn.q_proj), weight(attn.k_proj), _bias(attn.k_proj)

    return qk


def parts_of(backend, mixers: bool = False) -> Parts:
    """The modules of ``backend``'s model that the decomposition reads, or :class:`NotSplittable`;
    with ``mixers``, a hybrid of :data:`HYBRIDS` too (its mixer layers one component each)."""
    facts = backend.facts
    if facts.family == "attnscope":
        gpt = backend.model
        layers = [
            LayerParts(b, b.attn, b.attn.c_proj, b.ln_1, None, _fused_qk(b.attn.c_attn, gpt.config.n_embd))
            for b in gpt.transformer.h
        ]
        return Parts(layers, gpt.transformer.ln_f, gpt.lm_head, facts.n_head, facts.n_kv_head, facts.head_dim)
    refuse(facts, mixers)
    trunk, cfg = getattr(backend, "decoder", backend.trunk), backend.model.config.get_text_config()
    blocks = getattr(trunk, "layers", None) or trunk.h
    rotary = facts.positions == "rotary"
    layers = [
        _hf_layer(block, cfg, rotary) if i in facts.attention_layers else _mixer_layer(block, facts, i)
        for i, block in enumerate(blocks)
    ]
    final = getattr(trunk, "norm", None) or getattr(trunk, "final_layernorm", None) or trunk.ln_f
    cap = getattr(cfg, "final_logit_softcapping", None)
    unembed = backend.model.get_output_embeddings()
    return Parts(layers, final, unembed, facts.n_head, facts.n_kv_head, facts.head_dim, cap or None)


def _hf_layer(block: torch.nn.Module, cfg, rotary: bool) -> LayerParts:
    attn = getattr(block, "self_attn", None) or block.attn
    if hasattr(attn, "q_proj"):
        o_proj, qk = attn.o_proj, _split_qk(attn)
    else:  # GPT-2
        o_proj, qk = attn.c_proj, _fused_qk(attn.c_attn, cfg.hidden_size)
    norm_in = getattr(block, "input_layernorm", None) or block.ln_1
    post = block.post_attention_layernorm if hasattr(block, "post_feedforward_layernorm") else None
    rope = getattr(sys.modules[type(attn).__module__], "apply_rotary_pos_emb", None) if rotary else None
    if rotary and rope is None:
        raise NotSplittable(f"{type(attn).__name__}: its rotary embedding function was not found")
    q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
    return LayerParts(block, attn, o_proj, norm_in, post, qk, q_norm, k_norm, rope)


def _mixer_layer(block: torch.nn.Module, facts, i: int) -> LayerParts:
    mixer = getattr(block, HYBRIDS[facts.family], None)
    if mixer is None:
        raise NotSplittable(f"layer {i}: its mixer module ({HYBRIDS[facts.family]}) was not found")
    return LayerParts(block, None, None, block.input_layernorm, None, None, mixer=mixer,
                      mixer_name=facts.layers[i]["type"])


def refuse(facts, mixers: bool = False) -> None:
    """:class:`NotSplittable` naming what of this model the decomposition cannot split exactly
    (with ``mixers``, a hybrid of :data:`HYBRIDS` is split: its mixer layers one component each)."""
    if facts.differential:
        raise NotSplittable(
            "differential attention (DiffLlama): each head is a pair of softmaxes whose outputs are combined "
            "and group-normalised before o_proj, so a head's write is not its slice of the output projection"
        )
    other = [layer for layer in facts.layers if layer["type"] not in ("full", "sliding", "chunked", "nope")]
    if other and not (mixers and facts.family in HYBRIDS):
        kinds = ", ".join(f"layer {layer['index']} ({layer['type']})" for layer in other)
        where = f" (direct attribution splits {', '.join(HYBRIDS)})" if mixers else ""
        raise NotSplittable(
            f"the layers without softmax attention ({kinds}) are mixers the decomposition does not split{where}"
        )
    if facts.family == "falcon_h1":
        raise NotSplittable("a Mamba-2 mixer runs beside each layer's attention: its write is not split")
    if facts.score_parts:
        raise NotSplittable("multi-head latent attention (MLA): keys from a compressed latent are not split here")
    if facts.family not in FAMILIES and not (mixers and facts.family in HYBRIDS):
        raise NotSplittable(
            f"the decomposition is worked out for attnscope's GPT and {', '.join(FAMILIES)}; not for {facts.family}"
        )


@dataclass
class Capture:
    """What one run of the model left at ``positions`` (each tensor ``(P, ·)``, in the model's dtype)."""

    positions: list[int]
    resid_in: list[torch.Tensor] = field(default_factory=list)  # per layer (P, C): the residual stream entering it
    z: list[torch.Tensor] = field(default_factory=list)  # per layer (P, nh · hs): the output projection's input
    o: list[torch.Tensor] = field(default_factory=list)  # per layer (P, C): the output projection's output
    attn_out: list[torch.Tensor] = field(default_factory=list)  # per layer (P, C): what the attention adds
    resid_out: list[torch.Tensor] = field(default_factory=list)  # per layer (P, C)
    rope: list[tuple[torch.Tensor, torch.Tensor] | None] = field(default_factory=list)  # per layer (cos, sin) (P, ·)
    final: torch.Tensor | None = None  # (P, C): the residual stream entering the final norm


def _hidden(args, kwargs) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _first(out) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


# The hooks stay on the model and act only for the capture running in the calling context: a server
# computes several requests at once on one model, and hooks added for one run would record the others.
_CAPTURING: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("attnscope_components", default=None)
_LOCK = threading.Lock()


def _event(name: str, layer: int, args, kwargs, out=None) -> None:
    keep = _CAPTURING.get()
    if keep is not None:
        keep(name, layer, args, kwargs, out)


def _install(parts: Parts) -> None:
    """The hooks, once per model (marked on its final norm)."""
    with _LOCK:
        if getattr(parts.final_norm, "_attnscope_components", False):
            return
        for i, lp in enumerate(parts.layers):
            hooks = [(lp.block, "pre", "resid_in"), (lp.block, "post", "resid_out")]
            if lp.mixer is not None:  # what the mixer adds is kept as the layer's attn_out
                hooks.append((lp.mixer, "post", "attn_out"))
            else:
                hooks += [(lp.o_proj, "pre", "z"), (lp.o_proj, "post", "o"), (lp.attn, "pre", "rope")]
            if lp.post_attn is not None:
                hooks.append((lp.post_attn, "post", "attn_out"))
            for module, when, name in hooks:
                if when == "pre":
                    fn = lambda m, a, k, name=name, i=i: _event(name, i, a, k)  # noqa: E731
                    module.register_forward_pre_hook(fn, with_kwargs=True)
                else:
                    fn = lambda m, a, k, out, name=name, i=i: _event(name, i, a, k, out)  # noqa: E731
                    module.register_forward_hook(fn, with_kwargs=True)
        parts.final_norm.register_forward_pre_hook(lambda m, a, k: _event("final", -1, a, k), with_kwargs=True)
        parts.final_norm._attnscope_components = True


def capture(backend, parts: Parts, ids: list[int], positions: list[int], sink=None) -> Capture:
    """Run ``ids`` through ``backend.run`` (``sink`` gets its attention traces) with hooks keeping
    what the decomposition needs at ``positions``."""
    cap = Capture(positions)
    at = torch.tensor(positions, device=backend.device)
    n = len(parts.layers)
    for name in ("resid_in", "z", "o", "attn_out", "resid_out", "rope"):
        getattr(cap, name).extend([None] * n)

    def keep(name: str, layer: int, args, kwargs, out) -> None:
        if name == "rope":
            pe = kwargs.get("position_embeddings")
            cap.rope[layer] = None if pe is None else (pe[0][0, at].detach(), pe[1][0, at].detach())
        elif name == "final":
            cap.final = _hidden(args, kwargs)[0, at].detach()
        else:
            value = _hidden(args, kwargs) if out is None else _first(out)
            getattr(cap, name)[layer] = value[0, at].detach()

    _install(parts)
    token = _CAPTURING.set(keep)
    try:
        backend.run(ids, AttentionOptions(), sink, logits=False)
    finally:
        _CAPTURING.reset(token)
    for i, lp in enumerate(parts.layers):
        if lp.post_attn is None and lp.mixer is None:
            cap.attn_out[i] = cap.o[i]
        if lp.rope is not None and cap.rope[i] is None:
            raise NotSplittable(f"layer {i}: the rotary embedding's cos and sin were not passed to the attention")
    return cap


@dataclass
class Writes:
    """Each component's write at the captured positions, float64 (each ``(P, C)``, heads ``(nh, P, C)``)."""

    positions: list[int]
    embed: torch.Tensor
    heads: list[torch.Tensor]  # per layer (nh, P, C)
    bias: list[torch.Tensor]  # per layer (P, C): the output projection's bias
    mlps: list[torch.Tensor]  # per layer (P, C)
    resid_in: list[torch.Tensor]  # per layer (P, C): the residual stream the model computed entering it
    final: torch.Tensor  # (P, C): the residual stream the model computed entering the final norm
    frozen: list[str] = field(default_factory=list)  # the norms whose scale the split holds fixed (post-attention)
    mixers: list[torch.Tensor | None] = field(default_factory=list)  # per layer (P, C) on a mixer layer, else None

    def before(self, layer: int) -> tuple[list[str], torch.Tensor]:
        """The terms adding up to the residual stream entering ``layer``: names and ``(n, P, C)``
        (``embed``, ``L{l}H{h}`` or ``L{l}.mixer``, and ``L{l}.mlp`` for each earlier layer, then ``bias``)."""
        names, terms = ["embed"], [self.embed]
        for lay in range(layer):
            mixer = self.mixers[lay] if self.mixers else None
            names += [f"L{lay}H{h}" for h in range(self.heads[lay].shape[0])]
            names += [f"L{lay}.mixer"] * (mixer is not None) + [f"L{lay}.mlp"]
            terms += [*self.heads[lay], *([mixer] if mixer is not None else []), self.mlps[lay]]
        bias = sum(self.bias[:layer], torch.zeros_like(self.embed))
        return [*names, "bias"], torch.stack([*terms, bias])


def _wide(x: torch.Tensor) -> torch.Tensor:
    """float64 where the device has it (every one attnscope runs on but Apple's MPS)."""
    return x.double() if x.device.type != "mps" else x.float()


def writes(parts: Parts, cap: Capture) -> Writes:
    """Each component's write from a :class:`Capture`; :class:`NotSplittable` if they do not add up
    to the residual stream the model computed."""
    embed = _wide(cap.resid_in[0])
    heads, biases, mlps, frozen, mixers = [], [], [], [], []
    for i, lp in enumerate(parts.layers):
        P = len(cap.positions)
        if lp.mixer is not None:  # one component: what the mixer module added to the residual stream
            mixers.append(_wide(cap.attn_out[i]))
            heads.append(embed.new_zeros((0, *embed.shape)))
            biases.append(torch.zeros_like(embed))
            mlps.append(_wide(cap.resid_out[i]) - _wide(cap.resid_in[i]) - mixers[-1])
            continue
        mixers.append(None)
        w = _wide(weight(lp.o_proj))  # (C, nh · hs)
        z = _wide(cap.z[i]).view(P, parts.n_head, -1)  # (P, nh, hs)
        per_head = torch.einsum("phd,chd->hpc", z, w.view(w.shape[0], parts.n_head, -1))  # (nh, P, C)
        b = _bias(lp.o_proj)
        bias = torch.zeros_like(embed) if b is None else _wide(b).expand_as(embed)
        if lp.post_attn is not None:  # Gemma 2: the attention's output is normed before the residual add
            post = freeze(lp.post_attn, cap.o[i])
            per_head, bias = post.linear(per_head), post.linear(bias)
            frozen.append(f"layer {i}'s post-attention norm")
        heads.append(per_head)
        biases.append(bias)
        _agree(per_head.sum(0) + bias, cap.attn_out[i], f"layer {i}: the heads' writes and the attention's output")
        mlps.append(_wide(cap.resid_out[i]) - _wide(cap.resid_in[i]) - _wide(cap.attn_out[i]))
    resid_in = [_wide(x) for x in cap.resid_in]
    out = Writes(cap.positions, embed, heads, biases, mlps, resid_in, _wide(cap.final), frozen, mixers)
    total = embed + sum(h.sum(0) + b + m for h, b, m in zip(heads, biases, mlps))
    total = total + sum(x for x in mixers if x is not None)
    _agree(total, cap.final, "the components and the residual stream entering the final norm")
    return out


def _agree(parts_sum: torch.Tensor, model: torch.Tensor, what: str) -> None:
    """``parts_sum`` is what the model computed, to its precision; else :class:`NotSplittable`."""
    want = _wide(model)
    rtol = CHECK_RTOL.get(model.dtype, 2e-2)
    scale = 1.0 + float(want.abs().max())
    gap = float((parts_sum - want).abs().max())
    if gap > 10 * rtol * scale:
        raise NotSplittable(
            f"{what} differ by {gap:.3g}: this model writes into the residual stream in a way not split"
        )
