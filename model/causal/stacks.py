"""An encoder-decoder's two residual streams as sums of components, for :mod:`.seq2seq`'s splits; an
encoder's one stream likewise (BERT and its post-norm kin, DistilBERT, ModernBERT: :func:`stack_parts`).

Each stack (the encoder's, the decoder's) is a run of layers, each a run of sublayers: self-attention,
the decoder's cross-attention, the MLP. A sublayer reads the residual stream (through its input norm
where the family norms before it: T5, mBART, Pegasus, T5Gemma) and adds its write (through a norm on
the write where the family has one: T5Gemma); BART, Marian and their kin norm the residual stream
itself after each add (:data:`POST_NORM`). With every norm's scale frozen at its value on this text the
stream is a sum of terms: ``embed`` (what enters the first layer: the token embeddings as the stack
scales them, learned positions, BART's embedding norm), each self head ``L{l}H{h}`` and cross head
``L{l}C{h}`` (its slice of the output projection), each MLP ``L{l}.mlp``, and ``bias`` (the output
projections' biases and the post-add norms' offsets), each through every later post-add norm.

:func:`stream` gives those terms at any sublayer's entry or after the last layer, and checks their sum
against what the model computed there (:class:`~model.causal.NotSplittable` where it differs, never a
wrong split). The hooks that keep what it needs are installed once per model and act only for the
capture running in the calling context (:func:`seen_in`), as :mod:`.components`' do.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..options import AttentionOptions
from . import NotSplittable
from .components import _agree, _bias, _first, _hidden, _wide, weight
from .norms import freeze

# the encoders split: norming the stream after each add, and ModernBERT (pre-norm)
BERT_LIKE = ("bert", "roberta", "electra", "xlm-roberta", "distilbert", "modernbert")
WHY_NOT = {
    "albert": "albert: its layers are one module used again and again, so a layer's write is not its own term",
    "deberta-v2": "deberta-v2: its score adds content-to-position and position-to-content parts (disentangled "
                  "attention), whose terms are not worked out here",
}
POST_NORM = ("bart", "marian", "plbart", "blenderbot-small")  # layers that norm the residual stream after each add


@dataclass
class Sub:
    """One sublayer: its kind (``self``, ``cross``, ``mlp``), the module whose output is its write, and its norms."""

    kind: str
    module: torch.nn.Module
    o_proj: torch.nn.Module | None = None  # an attention's output projection (heads are its slices)
    norm_in: torch.nn.Module | None = None  # on the sublayer's input (pre-norm)
    norm_out: torch.nn.Module | None = None  # on its write, before the residual add (T5Gemma)
    post: torch.nn.Module | None = None  # on the residual stream after the add (BART)
    rope: Callable | None = None  # the family's apply_rotary_pos_emb(q, k, cos, sin), on a rotary self-attention
    attn: torch.nn.Module | None = None  # the module holding q and k where it is not ``module`` (BERT's)
    entry: torch.nn.Module | None = None  # whose input is the stream entering (else norm_in or module)

    def qk(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
        """Wq, bq, Wk, bk as ``(out, in)`` weights and their biases."""
        m = self.attn or self.module
        if hasattr(m, "Wqkv"):  # ModernBERT's fused projection: q's rows, then k's, then v's
            w, b = weight(m.Wqkv), _bias(m.Wqkv)
            c = w.shape[0] // 3
            return w[:c], None if b is None else b[:c], w[c : 2 * c], None if b is None else b[c : 2 * c]
        # T5's q, k; BERT's query, key; DistilBERT's q_lin, k_lin; the others' q_proj, k_proj
        qn, kn = next((q, k) for q, k in (("q", "k"), ("query", "key"), ("q_lin", "k_lin"), ("q_proj", "k_proj"))
                      if hasattr(m, q))
        q, k = getattr(m, qn), getattr(m, kn)
        return weight(q), _bias(q), weight(k), _bias(k)


@dataclass
class Stack:
    """One stack's modules in order, as the model names them."""

    name: str  # "encoder" or "decoder"
    blocks: list[torch.nn.Module]
    layers: list[list[Sub]]
    final: torch.nn.Module | None  # the norm after the last layer (None: BART's and Marian's layers end normed)
    n_head: int

    def find(self, layer: int, kind: str) -> tuple[int, Sub]:
        subs = self.layers[layer]
        return next((s, sub) for s, sub in enumerate(subs) if sub.kind == kind)


def stack_parts(backend, name: str) -> Stack:
    """The modules of ``backend``'s encoder (``name="encoder"``) or decoder that the splits read, or
    :class:`NotSplittable` naming a layout not known here."""
    if backend.facts.architecture == "encoder":
        return _encoder_stack(backend)
    model = backend.model
    trunk = model.get_encoder() if name == "encoder" else model.get_decoder()
    family = backend.facts.family
    if not hasattr(trunk, "block") and not hasattr(trunk, "layers"):  # T5Gemma 2: its text model inside
        raise NotSplittable(f"{family}: the layout of its {name} ({type(trunk).__name__}) is not known here")
    blocks = list(trunk.block if hasattr(trunk, "block") else trunk.layers)
    first = blocks[0]
    if hasattr(first, "layer") and hasattr(first.layer[0], "SelfAttention"):  # T5, mT5, UMT5
        layers, final = [_t5_subs(b) for b in blocks], trunk.final_layer_norm
    elif hasattr(first, "pre_self_attn_layernorm"):  # T5Gemma
        layers, final = [_gemma_subs(b) for b in blocks], trunk.norm
    elif hasattr(first, "self_attn_layer_norm") and hasattr(first, "fc2"):  # BART and its kin
        layers = [_bart_subs(b, family in POST_NORM) for b in blocks]
        final = getattr(trunk, "layer_norm", None)
    else:
        raise NotSplittable(f"{family}: the layout of its {name} layers ({type(first).__name__}) is not known here")
    n_head = next(s["n_head"] for s in backend.facts.stacks if s["name"] == name)
    return Stack(name, blocks, layers, final, n_head)


def _encoder_stack(backend) -> Stack:
    """An encoder's one stack (BERT and its post-norm kin), or :class:`NotSplittable` saying why not."""
    family = backend.facts.family
    if family not in BERT_LIKE:
        raise NotSplittable(WHY_NOT.get(family, f"{family}: the split of an encoder's score is worked out for "
                                        f"{', '.join(BERT_LIKE)}; not for {family}"))
    if family == "modernbert":  # pre-norm (none before layer 0's attention), RoPE; local and global layers
        blocks = list(backend.trunk.layers)
        rope = getattr(sys.modules[type(blocks[0].attn).__module__], "apply_rotary_pos_emb", None)
        if rope is None:
            raise NotSplittable("modernbert: its rotary embedding function was not found")
        layers = [[Sub("self", b.attn, b.attn.Wo, None if isinstance(b.attn_norm, torch.nn.Identity) else b.attn_norm,
                       rope=rope),
                   Sub("mlp", b.mlp, norm_in=b.mlp_norm)] for b in blocks]
        return Stack("encoder", blocks, layers, backend.trunk.final_norm, backend.facts.n_head)
    if family == "distilbert":
        blocks = list(backend.trunk.transformer.layer)
        layers = [[Sub("self", b.attention.out_lin, b.attention.out_lin, post=b.sa_layer_norm, attn=b.attention,
                       entry=b.attention),
                   Sub("mlp", b.ffn.lin2, post=b.output_layer_norm, entry=b.ffn)] for b in blocks]
    else:
        blocks = list(backend.trunk.encoder.layer)
        layers = [[Sub("self", b.attention.output.dense, b.attention.output.dense, post=b.attention.output.LayerNorm,
                       attn=b.attention.self, entry=b.attention),
                   Sub("mlp", b.output.dense, post=b.output.LayerNorm, entry=b.intermediate)] for b in blocks]
    return Stack("encoder", blocks, layers, None, backend.facts.n_head)


def _t5_subs(block: torch.nn.Module) -> list[Sub]:
    subs = []
    for part in block.layer:
        attn = getattr(part, "SelfAttention", None) or getattr(part, "EncDecAttention", None)
        if attn is None:
            subs.append(Sub("mlp", part.DenseReluDense, norm_in=part.layer_norm))
        else:
            subs.append(Sub("self" if hasattr(part, "SelfAttention") else "cross", attn, attn.o, part.layer_norm))
    return subs


def _bart_subs(block: torch.nn.Module, post: bool) -> list[Sub]:
    found = [("self", block.self_attn, block.self_attn_layer_norm)]
    if hasattr(block, "encoder_attn"):
        found.append(("cross", block.encoder_attn, block.encoder_attn_layer_norm))
    found.append(("mlp", block.fc2, block.final_layer_norm))
    return [
        Sub(kind, m, getattr(m, "out_proj", None), None if post else norm, post=norm if post else None)
        for kind, m, norm in found
    ]


def _gemma_subs(block: torch.nn.Module) -> list[Sub]:
    subs = []
    for kind, attr, norms in (("self", "self_attn", "self_attn"), ("cross", "cross_attn", "cross_attn"),
                              ("mlp", "mlp", "feedforward")):
        m = getattr(block, attr, None)
        if m is None:
            continue
        rope = getattr(sys.modules[type(m).__module__], "apply_rotary_pos_emb", None) if kind == "self" else None
        pre, post = getattr(block, f"pre_{norms}_layernorm"), getattr(block, f"post_{norms}_layernorm")
        subs.append(Sub(kind, m, getattr(m, "o_proj", None), pre, post, rope=rope))
    return subs


@dataclass
class Seen:
    """What one pass left in one stack at ``positions`` (each ``(P, C)``), by (layer, sublayer index)."""

    positions: list[int]
    embed: torch.Tensor | None = None  # what entered the first layer
    sub_in: dict = field(default_factory=dict)  # the residual stream entering the sublayer
    z: dict = field(default_factory=dict)  # an attention's output projection's input
    out: dict = field(default_factory=dict)  # the module's output (the write before norm_out)
    normed: dict = field(default_factory=dict)  # norm_out's output (T5Gemma)
    post_in: dict = field(default_factory=dict)  # the post-add norm's input (BART)
    rope: dict = field(default_factory=dict)  # (cos, sin) at the positions, a rotary self-attention's
    final: torch.Tensor | None = None  # the residual stream after the last layer
    bias: dict = field(default_factory=dict)  # layer -> T5's relative position bias (T, S, nh), where asked


_SEEING: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("attnscope_stacks", default=None)
_LOCK = threading.Lock()


def _event(*event) -> None:
    keep = _SEEING.get()
    if keep is not None:
        keep(*event)


def _install(backend) -> None:
    """The hooks on both stacks, once per model."""
    model = backend.model
    with _LOCK:
        if getattr(model, "_attnscope_stacks", False):
            return
        names = ["encoder"] if backend.facts.architecture == "encoder" else ["encoder", "decoder"]
        for st in (stack_parts(backend, name) for name in names):
            st.blocks[0].register_forward_pre_hook(lambda m, a, k, st=st: _event(st.name, 0, 0, "embed", a, k, None),
                                                   with_kwargs=True)
            last = len(st.blocks) - 1
            st.blocks[-1].register_forward_hook(
                lambda m, a, k, o, st=st, last=last: _event(st.name, last, 0, "final", a, k, o), with_kwargs=True
            )
            for i, subs in enumerate(st.layers):
                for s, sub in enumerate(subs):
                    hooks = [(sub.entry or sub.norm_in or sub.module, "pre", "sub_in"), (sub.module, "post", "out"),
                             (sub.module, "pre", "rope"), (sub.o_proj, "pre", "z"), (sub.norm_out, "post", "normed"),
                             (sub.post, "pre", "post_in"), (getattr(sub.module, "relative_attention_bias", None),
                                                            "post", "bias")]
                    for module, when, what in hooks:
                        if module is None:
                            continue
                        if when == "pre":
                            fn = lambda m, a, k, e=(st.name, i, s, what): _event(*e, a, k, None)  # noqa: E731
                            module.register_forward_pre_hook(fn, with_kwargs=True)
                        else:
                            fn = lambda m, a, k, o, e=(st.name, i, s, what): _event(*e, a, k, o)  # noqa: E731
                            module.register_forward_hook(fn, with_kwargs=True)
        model._attnscope_stacks = True


def seen_in(backend, stacks: list[Stack], ids: list[int], positions: dict[str, list[int]], sink=None,
            bias: tuple[str, int] | None = None) -> dict[str, Seen]:
    """Run ``ids`` through the bound ``backend`` (``sink`` gets the looked-at stack's traces), keeping each
    stack's activations at its ``positions`` and, with ``bias`` (stack, layer), that layer's relative
    position bias (T5's: the layer itself or the first layer before it with a bias of its own)."""
    seen = {st.name: Seen(positions[st.name]) for st in stacks}
    at = {name: torch.tensor(p, device=backend.device) for name, p in positions.items()}

    def keep(stack: str, layer: int, s: int, what: str, args, kwargs, out) -> None:
        if stack not in seen:
            return
        got, idx = seen[stack], at[stack]
        if what == "bias":
            if bias == (stack, layer):
                got.bias[layer] = out.detach()
        elif what == "rope":
            pe = kwargs.get("position_embeddings")
            if pe is not None:
                got.rope[(layer, s)] = (pe[0][0, idx].detach(), pe[1][0, idx].detach())
        elif what in ("embed", "final"):
            value = _hidden(args, kwargs) if out is None else _first(out)
            setattr(got, what, value[0, idx].detach())
        else:
            value = _hidden(args, kwargs) if out is None else _first(out)
            getattr(got, what)[(layer, s)] = value[0, idx].detach()

    _install(backend)
    token = _SEEING.set(keep)
    try:
        backend.run(ids, AttentionOptions(), sink, logits=False)
    finally:
        _SEEING.reset(token)
    return seen


def stream(st: Stack, seen: Seen, until: tuple[int, str] | None = None) -> tuple[list[str], torch.Tensor, list[str]]:
    """The terms adding up to ``st``'s residual stream entering sublayer ``until`` (layer, kind), or after the
    last layer (None): their names (``bias`` last), the terms ``(n, P, C)`` float64, and the norms held fixed."""
    names, terms = ["embed"], _wide(seen.embed)[None]
    bias, frozen = torch.zeros_like(terms[0]), []
    for i, subs in enumerate(st.layers):
        for s, sub in enumerate(subs):
            if until == (i, sub.kind):
                _agree(terms.sum(0) + bias, seen.sub_in[(i, s)], f"the {st.name}'s terms entering layer {i}")
                return [*names, "bias"], torch.cat([terms, bias[None]]), frozen
            new, b, labels = _writes(st, seen, i, s, sub)
            names += labels
            terms, bias = torch.cat([terms, new]), bias + b
            if sub.norm_out is not None and not frozen:
                frozen.append(f"the {st.name}'s norms on each sublayer's write")
            if sub.post is not None:  # the whole stream through the norm, its scale frozen; its offset a bias
                norm = freeze(sub.post, seen.post_in[(i, s)])
                terms, bias = norm.linear(terms), norm.linear(bias) + (0.0 if norm.offset is None else norm.offset)
                if not frozen:
                    frozen.append(f"the {st.name}'s norms after each residual add")
    if until is not None:
        raise NotSplittable(f"the {st.name} has no {until[1]} attention in layer {until[0]}")
    _agree(terms.sum(0) + bias, seen.final, f"the {st.name}'s terms after its last layer")
    return [*names, "bias"], torch.cat([terms, bias[None]]), frozen


def _writes(st: Stack, seen: Seen, i: int, s: int, sub: Sub) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """One sublayer's write as terms ``(n, P, C)`` (a head each, or the MLP's), their bias ``(P, C)``, names."""
    out = seen.out[(i, s)]
    if sub.o_proj is None:
        new, b, labels = _wide(out)[None], torch.zeros_like(_wide(out)), [f"L{i}.mlp"]
    else:
        w = _wide(weight(sub.o_proj))  # (C, nh · hs)
        z = _wide(seen.z[(i, s)]).view(len(seen.positions), st.n_head, -1)  # (P, nh, hs)
        new = torch.einsum("phd,chd->hpc", z, w.view(w.shape[0], st.n_head, -1))  # (nh, P, C)
        ob = _bias(sub.o_proj)
        b = torch.zeros_like(new[0]) if ob is None else _wide(ob).expand_as(new[0])
        letter = "H" if sub.kind == "self" else "C"
        labels = [f"L{i}{letter}{h}" for h in range(st.n_head)]
        _agree(new.sum(0) + b, out, f"the {st.name}'s layer {i}: the heads' writes and the attention's output")
    if sub.norm_out is not None:  # T5Gemma: the write is normed before the add
        norm = freeze(sub.norm_out, out)
        new, b = norm.linear(new), norm.linear(b) + (0.0 if norm.offset is None else norm.offset)
        _agree(new.sum(0) + b, seen.normed[(i, s)], f"the {st.name}'s layer {i}: its normed write")
    return new, b, labels
