"""A model a notebook names, made a :class:`~attnscope.app.service.Service` once, and the API's
answer computed in the kernel: what :mod:`attnscope.app.notebook` and the widget
(:mod:`attnscope.app.notebook.widget`) both need, with no HTTP server and no port.

The model is the shipped one, a checkpoint folder or ``.gguf`` file, a transformers model object
with its tokenizer, or an ``attnscope.load_model()`` result (:func:`service_for`).
"""

from __future__ import annotations

import base64
import io
import os
from pathlib import Path
from typing import Any

import numpy as np

TOP_K = 10  # next-token guesses per position


def _tokenizer_from(tokenizer):
    """A :class:`BPETokenizer` from what a notebook holds: a transformers fast tokenizer, a
    ``tokenizers.Tokenizer`` or one of ours. The BOS is kept when the tokenizer adds one."""
    from tokenizers import Tokenizer

    from ...model.ours.tokenizer import BPETokenizer

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
    from ...model.families.attention import IMPLEMENTATION, recording_active, register
    from ...model.families.backend import TransformersBackend

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
    from ...model.backends import LoadedModel

    if model is None or tokenizer is None:
        raise TypeError("show/capture with model= needs tokenizer= too (the model's fast tokenizer)")
    if not hasattr(model, "set_attn_implementation"):
        raise TypeError(f"model: a transformers PreTrainedModel (AutoModelForCausalLM); got {type(model).__name__}")
    from ...model.families.encoder import is_encoder

    if is_encoder(model.config.to_dict()):
        raise TypeError(
            f"model: {type(model).__name__} is an encoder; a model object is taken for causal LMs only: save it "
            "(save_pretrained, with its tokenizer) and pass checkpoint=FOLDER"
        )
    device = next(model.parameters()).device
    label = name or str(getattr(model.config, "name_or_path", "") or type(model).__name__)
    backend = _backend_class()(model, _tokenizer_from(tokenizer), device, name=Path(label).name or label)
    return LoadedModel(backend=backend, path=Path(label))


_services: dict[Any, Any] = {}


def service_for(model=None, tokenizer=None, checkpoint=None, device: str | None = "cpu"):
    """The :class:`~attnscope.app.service.Service` for the shipped model (nothing given), a
    checkpoint folder or ``.gguf`` file (``checkpoint=``), a model by its Hugging Face name
    (``model="ORG/NAME[@REVISION]"``: the Hub cache first), a model object (``model=`` and
    ``tokenizer=``) or an ``attnscope.load_model()`` result (``model=``); made once per model."""
    from ...model.backends import LoadedModel
    from ..service import build_service

    if isinstance(model, str):  # a name, as from_pretrained takes it
        from ...model.sources.hub import resolve_hub

        if checkpoint is not None:
            raise TypeError("give model= or checkpoint=, not both")
        model, checkpoint = None, resolve_hub(model)

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
            from ...model.registry import load_model

            lm = load_model(checkpoint, device=device)
        svc = build_service(lm, with_heads=False)
        svc.extra["source"] = model
        _services[key] = svc
    return svc


def image_value(image) -> str | None:
    """``show``'s and ``capture``'s ``image`` as the API's ``image`` (base64): a ``PIL.Image`` (sent
    as PNG), a path to an image file, or the file's bytes; ``None`` stays ``None``. A path that cannot
    be read raises ``OSError`` naming it; what the bytes hold is judged as the API judges it."""
    if image is None:
        return None
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
    elif isinstance(image, (str, os.PathLike)):
        data = Path(image).read_bytes()
    elif hasattr(image, "save") and hasattr(image, "size"):  # a PIL image
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        data = buf.getvalue()
    else:
        raise TypeError(f"image is a {type(image).__name__}; pass a PIL.Image, a path or the file's bytes")
    return base64.b64encode(data).decode()


def audio_value(audio) -> str | None:
    """``show``'s and ``capture``'s ``audio`` as the API's ``audio`` (base64): a path to a recording (WAV,
    FLAC, OGG/Vorbis, MP3) or the file's bytes; ``None`` stays ``None``. What the bytes hold is judged as
    the API judges it."""
    if audio is None:
        return None
    if isinstance(audio, (bytes, bytearray)):
        return base64.b64encode(bytes(audio)).decode()
    if isinstance(audio, (str, os.PathLike)):
        return base64.b64encode(Path(audio).read_bytes()).decode()
    raise TypeError(f"audio is a {type(audio).__name__}; pass a path or the file's bytes")


def request(**fields):
    from ..schemas.attention import AttentionRequest

    return AttentionRequest(**fields)


def answer_bytes(svc, **fields) -> bytes:
    """The exact bytes ``POST /api/attention`` answers for this request body."""
    from ..compute.attention import attention_json
    from ..subject import subject_of

    req = request(**fields)
    body, _ = attention_json(svc, req, subject_of(svc, req))
    return body



def decode_answer(x):
    """The API's b64 typed arrays -> numpy arrays of the same shape and dtype (in place)."""
    if isinstance(x, list):
        return [decode_answer(v) for v in x]
    if isinstance(x, dict):
        if isinstance(x.get("bdata"), str) and isinstance(x.get("dtype"), str):
            dt = {"u1": np.uint8, "f2": np.float16, "f4": np.float32}[x["dtype"]]
            shape = tuple(int(s) for s in str(x.get("shape", "")).split(",") if s.strip())
            a = np.frombuffer(base64.b64decode(x["bdata"]), dtype=np.dtype(dt).newbyteorder("<"))
            return a.reshape(shape) if shape else a
        return {k: decode_answer(v) for k, v in x.items()}
    return x
