"""attnscope in a notebook: ``show`` (an anywidget widget) and ``capture`` (numpy arrays).

Both compute in the kernel, with the very functions the JSON API uses: no HTTP server, no port.
Here: the model a notebook names (the shipped one, a checkpoint, or a transformers model object
with its tokenizer) made a service once (:func:`service_for`), the API's answer for a request
(:func:`answer_bytes`, :func:`capture`), and :func:`show`. The widget itself is
:mod:`attnscope.app.widget` (its JavaScript: :mod:`.widget_assets`; its static HTML view:
:mod:`.snapshot`). ``widget.snapshot()`` displays the current view as that HTML, after typing
in the widget.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["capture", "show", "service_for"]  # and AttnScope, the widget class (imported on first use)

CAPTURE_INCLUDE = ["pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled", "stats", "q", "k", "v"]
TOP_K = 10


# ------------------------------------------------------------------ models


def _tokenizer_from(tokenizer):
    """A :class:`BPETokenizer` from what a notebook holds: a transformers fast tokenizer, a
    ``tokenizers.Tokenizer`` or one of ours. The BOS is kept when the tokenizer adds one."""
    from tokenizers import Tokenizer

    from ..model.tokenizer import BPETokenizer

    if isinstance(tokenizer, BPETokenizer):
        return tokenizer
    if isinstance(tokenizer, Tokenizer):
        return BPETokenizer(tokenizer)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        raise TypeError(
            f"tokenizer: attnscope needs a fast tokenizer (transformers' AutoTokenizer with use_fast=True, "
            f"or a tokenizers.Tokenizer); got {type(tokenizer).__name__}"
        )
    bos = None
    with_special = tokenizer("a", add_special_tokens=True)["input_ids"]
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    if len(with_special) > len(plain) and list(with_special[1:]) == list(plain[: len(with_special) - 1]):
        bos = tokenizer.convert_ids_to_tokens(with_special[0])
    # a copy without the post-processor's specials: BPETokenizer adds the BOS itself
    return BPETokenizer(Tokenizer.from_str(backend.to_str()), bos_token=bos)


def _backend_class():
    """TransformersBackend for a user's model object. Its attention runs through attnscope's
    function only while attnscope records (a pre-hook on the base model switches the
    implementation when a recording is active, a hook that always runs switches it back), so the
    model keeps its own implementation (sdpa, flash) for everything else the notebook does."""
    from ..model.hf_attention import IMPLEMENTATION, recording_active, register
    from ..model.hf_backend import TransformersBackend

    def before(module, args, kwargs):
        if not recording_active():
            return
        previous = getattr(module.config, "_attn_implementation", None)
        if previous != IMPLEMENTATION:
            module._attnscope_previous = previous or "eager"
            module.set_attn_implementation(IMPLEMENTATION)

    def after(module, args, kwargs, output):
        previous = module.__dict__.pop("_attnscope_previous", None)
        if previous is not None:
            module.set_attn_implementation(previous)

    class NotebookBackend(TransformersBackend):
        def __init__(self, model, tokenizer, device, name):
            register()
            base = model.base_model
            if not getattr(base, "_attnscope_hooked", False):
                base.register_forward_pre_hook(before, with_kwargs=True)
                base.register_forward_hook(after, with_kwargs=True, always_call=True)
                base._attnscope_hooked = True
            super().__init__(model, tokenizer, device, name)

    return NotebookBackend


def loaded_from_objects(model, tokenizer, name: str | None = None):
    """A :class:`LoadedModel` around a transformers causal LM already in memory, on its own device."""
    from ..model.backends import LoadedModel

    if model is None or tokenizer is None:
        raise TypeError("show/capture with model= needs tokenizer= too (the model's fast tokenizer)")
    if not hasattr(model, "set_attn_implementation"):
        raise TypeError(f"model: a transformers PreTrainedModel (AutoModelForCausalLM); got {type(model).__name__}")
    device = next(model.parameters()).device
    label = name or str(getattr(model.config, "name_or_path", "") or type(model).__name__)
    backend = _backend_class()(model, _tokenizer_from(tokenizer), device, name=Path(label).name or label)
    return LoadedModel(backend=backend, path=Path(label))


_services: dict[Any, Any] = {}


def service_for(model=None, tokenizer=None, checkpoint=None, device: str | None = "cpu"):
    """The :class:`~attnscope.app.service.Service` for the shipped model (nothing given), a
    checkpoint folder or ``.gguf`` file (``checkpoint=``), a model object (``model=`` and
    ``tokenizer=``) or an ``attnscope.load_model()`` result (``model=``); made once per model."""
    from ..model.backends import LoadedModel
    from .service import build_service

    if model is not None and checkpoint is not None:
        raise TypeError("give model= (with tokenizer=) or checkpoint=, not both")
    if isinstance(model, LoadedModel):
        key = ("loaded", id(model))
    elif model is not None:
        key = ("object", id(model), id(tokenizer))
    else:
        key = ("path", str(Path(checkpoint).resolve()) if checkpoint else None, device)
    svc = _services.get(key)
    if svc is None or (model is not None and svc.loaded is not model and svc.extra.get("source") is not model):
        if isinstance(model, LoadedModel):
            lm = model
        elif model is not None:
            lm = loaded_from_objects(model, tokenizer)
        else:
            from ..model.registry import load_model

            lm = load_model(checkpoint, device=device)
        svc = build_service(lm, with_heads=False)
        svc.extra["source"] = model
        _services[key] = svc
    return svc


def _request(**fields):
    from .schemas.attention import AttentionRequest

    return AttentionRequest(**fields)


def answer_bytes(svc, **fields) -> bytes:
    """The exact bytes ``POST /api/attention`` answers for this request body."""
    from .encoding import attention_json

    body, _ = attention_json(svc, _request(**fields))
    return body


# ------------------------------------------------------------------ capture


def _decode(x):
    """The API's b64 typed arrays -> numpy arrays of the same shape and dtype (in place)."""
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if isinstance(x, dict):
        if isinstance(x.get("bdata"), str) and isinstance(x.get("dtype"), str):
            dt = {"u1": np.uint8, "f2": np.float16, "f4": np.float32}[x["dtype"]]
            shape = tuple(int(s) for s in str(x.get("shape", "")).split(",") if s.strip())
            a = np.frombuffer(base64.b64decode(x["bdata"]), dtype=np.dtype(dt).newbyteorder("<"))
            return a.reshape(shape) if shape else a
        return {k: _decode(v) for k, v in x.items()}
    return x


def capture(
    text: str,
    model=None,
    tokenizer=None,
    checkpoint=None,
    *,
    include: list[str] | None = None,
    layers: list[int] | None = None,
    heads: list[int] | None = None,
    causal: bool = True,
    scale: str | float = "model",
    top_k: int = TOP_K,
    temperature: float = 1.0,
) -> dict[str, Any]:
    """What ``POST /api/attention`` answers for ``text``, with numpy arrays for its matrices.

    The keys are the API contract's: ``tokens``, ``token_ids``, ``offsets``, ``mask`` (T×T, 1 where
    a key may be attended), ``layers[i]["heads"][j]["pattern"]`` (T×T float32, each row sums to
    1), ``attn_scores_raw``, ``attn_scores``, ``pattern_unscaled``, ``q``, ``k``, ``v``, ``stats``,
    ``predictions`` and ``model``. By default every layer and head with every field, as the
    page's JSON export. The numbers are the API's own (its ``b64`` encoding, float32).
    """
    from .compute.attention import answer_arrays

    svc = service_for(model, tokenizer, checkpoint)
    request = _request(
        text=text,
        include=list(include if include is not None else CAPTURE_INCLUDE),
        layers=layers,
        heads=heads,
        encoding="b64",
        precision="f4",
        causal=causal,
        scale=scale,
        top_k=top_k,
        temperature=temperature,
    )
    return answer_arrays(svc, request)


# ------------------------------------------------------------------ the widget


def __getattr__(name: str):
    """``notebook.AttnScope``: the widget class, imported on first use (it needs anywidget)."""
    if name == "AttnScope":
        from .widget import AttnScope

        return AttnScope
    raise AttributeError(name)


def show(
    text: str, model=None, tokenizer=None, checkpoint=None, *, layer: int = 0, head: int = 0, causal=True, scaled=True
):
    """A widget with attnscope's head view for ``text``: the all-heads grid, the chosen head, the
    what-if switches and the predictions; typing in it re-runs the model in the kernel.

    ``show(text)``: the shipped model. ``show(text, model=m, tokenizer=tok)``: a transformers causal
    LM you loaded (any family attnscope opens, on its device). ``show(text, checkpoint=PATH)``: a
    checkpoint folder or ``.gguf`` file.
    """
    from .widget import AttnScope

    svc = service_for(model, tokenizer, checkpoint)
    return AttnScope(svc, text, layer=layer, head=head, causal=causal, scaled=scaled)
