"""A hybrid's mixers that are linear in their values, recorded from the tensors each feeds its own scan.

:func:`recording_scans` watches one forward pass of a transformers model and keeps, per layer, a
:class:`Scan`: the mixer's name, what its scan read (after the layer's convolution, activation,
norms and gates), its values ``v`` and the scan's own output ``out``, so that ``o_t = Σ_s M[t, s]
v_s (+ skip · v_t)`` can be held exactly (:meth:`Scan.rows` gives M a block of query rows at a time,
:mod:`model.families.mixers` the arithmetic). How each mixer is watched in transformers 5.23:

* ``gated_deltanet`` (Qwen3-Next, Qwen3.5, OLMo hybrid): the module-level ``torch_chunk_gated_delta_rule``
  the layer calls, wrapped; q and k are l2-normalised and q scaled by ``d_k^-1/2`` here as that function does.
* ``kimi_delta`` (Kimi Linear): ``chunk_kimi_delta_attention``, wrapped, the same with its decay per channel.
* ``mamba2`` (Bamba, Granite 4.0-H, Nemotron-H, Falcon-H1, Zamba2, Mamba-2): ``mamba2_chunk_scan``,
  wrapped; Δ gets its bias, softplus and limits here as the scan does; ``skip`` is D.
* ``lightning`` (MiniMax): the layer's ``qkv_proj`` output (then its activation) and its ``norm``'s input.
* ``short_conv`` (LFM2): the layer's ``in_proj`` output (B, C, x) and its ``out_proj``'s input;
  per channel, exact only without a convolution bias (a bias adds a term no value carries).

A wrapper or hook records only inside :func:`recording_scans` of the same context (a context
variable), so concurrent forward passes through one model never share a record. Batch row 0 is recorded.

Switching an implicit head off (``ablate`` of a :func:`~model.families.attention.recording`'s options,
:func:`install_mixers`): the head's slice of the scan's output (its Σ_s M v + skip · v) becomes 0 before
the layer's gate, norm and projection, per batch row as ``ablate_rows`` says; only in a layer without
softmax attention (Falcon-H1's Mamba-2 shares its layer's number with the attention heads it runs beside).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from dataclasses import dataclass, field

import torch

from .attention import current
from .scans import PER_CHANNEL, SCAN_RECORDS, Scan

# the module-level scan function each mixer's layer calls, by mixer
SCAN_FUNCTIONS = {
    "gated_deltanet": "torch_chunk_gated_delta_rule",
    "kimi_delta": "chunk_kimi_delta_attention",
    "mamba2": "mamba2_chunk_scan",
    "mamba1": "mamba_selective_scan",
}
MIXERS = ("gated_deltanet", "kimi_delta", "mamba2", "lightning", "mamba1", "short_conv")


@dataclass
class _Scans:
    scans: dict[int, Scan] = field(default_factory=dict)
    pending: dict[int, dict] = field(default_factory=dict)  # module-hooked mixers: layer -> parts so far


_ACTIVE: contextvars.ContextVar[_Scans | None] = contextvars.ContextVar("attnscope_scans", default=None)
# the mixer running now, set by its forward pre-hook (install_mixers); -1 where its heads cannot be switched off
_LAYER: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("attnscope_mixer", default=None)
SWITCHABLE = ("gated_deltanet", "kimi_delta", "mamba2", "lightning")  # one output slice per head


def mixer_of(module: torch.nn.Module) -> str | None:
    """The mixer a transformers module is, by its class and parameters, or None."""
    name = type(module).__name__
    if name.endswith("GatedDeltaNet"):
        return "gated_deltanet"
    if name.endswith("DeltaAttention") and hasattr(module, "forget_gate"):
        return "kimi_delta"
    if name.endswith("LightningAttention"):
        return "lightning"
    if name.endswith("ShortConv"):
        return "short_conv"
    if name.endswith("Mixer") and getattr(module, "A_log", None) is not None:
        return "mamba2" if module.A_log.dim() == 1 else "mamba1"
    return None


def _wrap(namespace, fname: str, mixer: str) -> None:
    """Replace ``namespace.fname`` by a recording wrapper, once."""
    original = getattr(namespace, fname)
    if getattr(original, "_attnscope_original", None) is not None:
        return

    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        active = _ACTIVE.get()
        running = _LAYER.get()
        if active is not None and running is not None:
            scan = SCAN_RECORDS[mixer](args, kwargs, result)
            scan.layer = running[0]
            active.scans[running[0]] = scan
        if running is not None and running[1] >= 0 and mixer in SWITCHABLE:
            out = result[0] if isinstance(result, tuple) else result  # (batch, T, heads, dv)
            out = knock_out(switch_off(out, running[1], 2), running[1], mixer, args, kwargs, result)
            result = (out, *result[1:]) if isinstance(result, tuple) else out
        return result

    wrapper._attnscope_original = original
    setattr(namespace, fname, wrapper)


def _module_hooks(module: torch.nn.Module, mixer: str, layer: int, active: _Scans) -> list:
    """Forward hooks that record a lightning or short-convolution layer from its own submodules."""
    if mixer == "lightning":

        def take_qkv(_m, _inp, output):
            if _ACTIVE.get() is not active:  # another call's forward pass through the same model
                return
            qkv = module.act_fn(output)[0].reshape(output.shape[1], module.num_attention_heads, -1)
            q, k, v = torch.split(qkv.transpose(0, 1).float(), module.head_dim, dim=-1)
            active.pending[layer] = {"q": q, "k": k, "v": v}

        def take_out(_m, inp):
            if _ACTIVE.get() is not active:
                return
            got = active.pending.pop(layer)
            out = inp[0][0].reshape(inp[0].shape[1], module.num_attention_heads, -1).transpose(0, 1).float()
            slope = module.slope_rate.reshape(-1).float()
            active.scans[layer] = Scan(layer, mixer, {"q": got["q"], "k": got["k"], "slope": slope}, got["v"], out)

        # before any switching off at the norm's input: the scan's own output is recorded
        return [
            module.qkv_proj.register_forward_hook(take_qkv),
            module.norm.register_forward_pre_hook(take_out, prepend=True),
        ]

    def take_bcx(_m, _inp, output):
        if _ACTIVE.get() is not active:
            return
        B, C, x = output[0].float().transpose(0, 1).chunk(3, dim=0)
        active.pending[layer] = {"B": B, "C": C, "x": x}

    def take_y(_m, inp):
        if _ACTIVE.get() is not active:
            return
        got = active.pending.pop(layer)
        weight = module.conv.weight.detach().squeeze(1).float()
        out = inp[0][0].float().transpose(0, 1)[..., None]
        parts = {"B": got["B"], "C": got["C"], "weight": weight}
        active.scans[layer] = Scan(layer, mixer, parts, got["x"][..., None], out)

    return [module.in_proj.register_forward_hook(take_bcx), module.out_proj.register_forward_pre_hook(take_y)]


def switch_off(out: torch.Tensor, layer: int, axis: int) -> torch.Tensor:
    """``out`` with the heads the running options switch off in ``layer`` zeroed: ``out``'s heads on ``axis``
    (dim 2 of (batch, T, heads, dv)), unchanged where none is."""
    rec = current()
    if rec is None:
        return out
    mask = rec.opts.switched_off(layer, out.shape[0], out.shape[axis], out.device)  # (batch, heads, 1, 1)
    if mask is None:
        return out
    return out * ~mask.transpose(1, 2)  # (batch, 1, heads, 1)


def knock_out(out: torch.Tensor, layer: int, mixer: str, args, kwargs, result) -> torch.Tensor:
    """``out`` (batch, T, heads, dv) without the terms M[t, s] v_s of the running options' knocked-out edges of
    ``layer`` (batch row 0; a cell knocked out twice counts once): M's rows of those queries from the scan's
    own inputs. The skip (Mamba-2's D v_t) is no edge and stays."""
    rec = current()
    edges = [] if rec is None else [e for e in rec.opts.knockout if e[0] == layer]
    if not edges:
        return out
    scan = SCAN_RECORDS[mixer](args, kwargs, result)
    H, T = scan.v.shape[0], scan.v.shape[1]
    lo, hi = min(e[2] for e in edges), max(e[3] for e in edges)
    knocked = torch.zeros(H, hi - lo, T, dtype=torch.bool, device=out.device)
    for _, head, q0, q1, k0, k1 in edges:
        knocked[slice(None) if head is None else head, q0 - lo : q1 - lo, k0:k1] = True
    rows = scan.rows(lo, hi) * knocked  # (heads, rows, T): the knocked terms' M
    terms = torch.einsum("hrs,hsd->rhd", rows, scan.v)  # (rows, heads, dv)
    out = out.clone()
    out[0, lo:hi] -= terms.to(out.dtype)
    return out


def install_mixers(model: torch.nn.Module, attention_layers=()) -> None:
    """Once per model: each value-linear mixer's scan function wrapped and a forward pre-hook naming the mixer
    running (its heads switched off as the running options say, except in ``attention_layers``, which run
    softmax attention beside it); lightning attention switched off at its norm's input."""
    for module in model.modules():
        mixer = mixer_of(module)
        if mixer is None or getattr(module, "_attnscope_mixer", False):
            continue
        module._attnscope_mixer = True
        layer = int(module.layer_idx)
        off = layer if layer not in attention_layers and mixer in SWITCHABLE else -1
        if mixer in SCAN_FUNCTIONS:
            _wrap(sys.modules[type(module).__module__], SCAN_FUNCTIONS[mixer], mixer)

            def enter(_m, _inp, running=(layer, off)):
                _LAYER.set(running)

            module.register_forward_pre_hook(enter)
        elif mixer == "lightning" and off >= 0:

            def lightning_off(_m, inp, layer=layer, heads=module.num_attention_heads):
                x = inp[0]  # (batch, T, heads · dv)
                y = switch_off(x.reshape(*x.shape[:2], heads, -1), layer, 2).reshape(x.shape)
                return None if y is x else (y, *inp[1:])

            module.norm.register_forward_pre_hook(lightning_off)


@contextlib.contextmanager
def recording_scans(model: torch.nn.Module):
    """Record every value-linear mixer's scan in forward passes of ``model`` inside the block:
    yields a dict, layer -> :class:`Scan` (the last pass's)."""
    active = _Scans()
    handles = []
    install_mixers(model)  # a model the backend did not open (a reference in a test): never switched off here
    for module in model.modules():
        mixer = mixer_of(module)
        if mixer is not None and mixer not in SCAN_FUNCTIONS:
            handles += _module_hooks(module, mixer, int(module.layer_idx), active)
    token = _ACTIVE.set(active)
    try:
        yield active.scans
    finally:
        _ACTIVE.reset(token)
        for h in handles:
            h.remove()


def mark_mixers(model: torch.nn.Module, layers: list[dict], attention_layers: list[int]) -> list[dict]:
    """``layers`` (``/api/model``'s) with each value-linear layer's ``type`` its mixer, ``implicit``
    true and ``heads`` (its M heads; 1 for a per-channel mixer, the mean of |M|). A layer that also
    has softmax attention (Falcon-H1 runs Mamba-2 beside it) keeps its attention type and note and
    adds ``mixer`` and ``mixer_heads``."""
    for module in model.modules():
        mixer = mixer_of(module)
        if mixer is None:
            continue
        heads = 1 if mixer in PER_CHANNEL else _mixer_heads(module)
        if int(module.layer_idx) in attention_layers:
            layers[int(module.layer_idx)] |= {"mixer": mixer, "mixer_heads": heads}
        else:
            layers[int(module.layer_idx)] |= {"type": mixer, "implicit": True, "heads": heads}
    return layers


def _mixer_heads(module: torch.nn.Module) -> int:
    for name in ("num_v_heads", "num_heads", "num_attention_heads"):
        if getattr(module, name, None):
            return int(getattr(module, name))
    raise ValueError(f"cannot tell the heads of {type(module).__name__}")
