"""attnscope in a notebook: ``show`` (an anywidget widget), ``capture`` (numpy arrays) and ``lens``.

Both compute in the kernel, with the very functions the JSON API uses: no HTTP server, no port.
Here: :func:`capture` and :func:`show`. The model a notebook names (the shipped one, a checkpoint,
or a transformers model object with its tokenizer) is made a service once by
:mod:`attnscope.app.notebook.service`, which also computes the API's answer for the widget. The widget itself is
:mod:`attnscope.app.notebook.widget` (its JavaScript: :mod:`.assets`; its static HTML view:
:mod:`.snapshot`). ``widget.snapshot()`` displays the current view as that HTML, after typing
in the widget.
"""

from __future__ import annotations

from typing import Any

from .service import TOP_K, audio_value, image_value, request, service_for

__all__ = ["capture", "lens", "show", "service_for"]  # and AttnScope, the widget class (imported on first use)

CAPTURE_INCLUDE = ["pattern", "attn_scores_raw", "attn_scores", "pattern_unscaled", "stats", "q", "k", "v"]


# ------------------------------------------------------------------ capture


def capture(
    text: str | None = None,
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
    image=None,
    messages: list[dict] | None = None,
    audio=None,
    target: str | None = None,
    stack: str | None = None,
) -> dict[str, Any]:
    """What ``POST /api/attention`` answers for ``text``, with numpy arrays for its matrices.

    The keys are the API contract's: ``tokens``, ``token_ids``, ``offsets``, ``mask`` (T×T, 1 where
    a key may be attended), ``layers[i]["heads"][j]["pattern"]`` (T×T float32, each row sums to
    1), ``attn_scores_raw``, ``attn_scores``, ``pattern_unscaled``, ``q``, ``k``, ``v``, ``stats``,
    ``predictions`` and ``model``. By default every layer and head with every field, as the
    page's JSON export. The numbers are the API's own (its ``b64`` encoding, float32).
    ``image`` (an image-text model): a ``PIL.Image``, a path or the file's bytes, laid out with the
    text as ``POST /api/attention`` lays it out; the answer then has ``token_kinds`` and ``image``.
    ``messages`` (a chat model), instead of ``text``: ``[{"role", "content"}, ...]`` laid out by the
    model's chat template; the answer then has ``token_kinds``, ``spans`` and ``span_mass``.
    ``audio`` (a speech model), instead of ``text``: a recording's path or bytes; ``target`` its text
    (else the model writes it), ``stack`` ``encoder``, ``decoder`` or ``cross``; the answer then has
    ``audio``, ``token_timestamps`` and ``words``.
    """
    from ..compute.attention import answer_arrays
    from ..subject import subject_of

    svc = service_for(model, tokenizer, checkpoint)
    body = request(
        text=text,
        messages=messages,
        include=list(include if include is not None else CAPTURE_INCLUDE),
        layers=layers,
        heads=heads,
        encoding="b64",
        precision="f4",
        causal=causal,
        scale=scale,
        top_k=top_k,
        temperature=temperature,
        image=image_value(image),
        audio=audio_value(audio),
        target=target,
        stack=stack,
    )
    return answer_arrays(svc, body, subject_of(svc, body))


def lens(
    text: str | None = None,
    model=None,
    tokenizer=None,
    checkpoint=None,
    *,
    lens: str = "logit",
    jlens=None,
    heads: bool = False,
    top_k: int = 5,
    image=None,
    messages: list[dict] | None = None,
) -> dict[str, Any]:
    """What ``POST /api/lens`` answers for ``text``: the top tokens after each block, read by the logit
    lens (``lens="logit"``) or by a Jacobian lens (``lens="jacobian"``, ``jlens=`` a file
    ``attnscope jlens`` wrote, or ``ORG/NAME:FILE`` in the local Hugging Face cache); ``heads=True``
    adds each head's write read the same way. A lens that does not fit the model: ``ValueError``."""
    import dataclasses

    import orjson

    from ...model.jlens.lensfile import check_fits, load_lens, resolve_lens
    from ..compute.causal.lens import lens_json
    from ..schemas.lens import LensRequest
    from ..subject import subject_of

    svc = service_for(model, tokenizer, checkpoint)
    if lens == "jacobian" and jlens is None:
        raise ValueError("lens='jacobian' needs jlens=: a file attnscope jlens wrote, or ORG/NAME:FILE")
    if jlens is not None:
        fitted = load_lens(resolve_lens(jlens))
        check_fits(fitted, svc.loaded.facts)
        svc = dataclasses.replace(svc, jlens=fitted)
    req = LensRequest(text=text, messages=messages, lens=lens, heads=heads, top_k=top_k, image=image_value(image))
    return orjson.loads(lens_json(svc, req, subject_of(svc, req)))


# ------------------------------------------------------------------ the widget


def __getattr__(name: str):
    """``notebook.AttnScope``: the widget class, imported on first use (it needs anywidget)."""
    if name == "AttnScope":
        from .widget import AttnScope

        return AttnScope
    raise AttributeError(name)


def show(
    text: str | None = None,
    model=None,
    tokenizer=None,
    checkpoint=None,
    *,
    image=None,
    messages: list[dict] | None = None,
    audio=None,
    target: str | None = None,
    stack: str | None = None,
    layer: int = 0,
    head: int = 0,
    causal=True,
    scaled=True,
):
    """A widget with attnscope's head view for ``text``: the all-heads grid, the chosen head, the
    what-if switches and the predictions; typing in it re-runs the model in the kernel.

    ``show(text)``: the shipped model. ``show(text, model=m, tokenizer=tok)``: a transformers causal
    LM you loaded (any family attnscope opens, on its device). ``show(text, checkpoint=PATH)``: a
    checkpoint folder or ``.gguf`` file; ``show(text, model="ORG/NAME")``: a model by its Hugging
    Face name (the Hub cache first, as ``from_pretrained``). ``image=`` (an image-text model): a
    ``PIL.Image`` or a path, shown with every text typed (an image the API refuses: the widget's
    error, as for a text; a path that cannot be read: ``OSError`` at once). ``audio=`` (a speech model,
    Whisper): a recording's path or bytes, heard with every text typed as its target (none: the model
    writes it). ``target=`` (an encoder–decoder: T5, BART, ...): the decoder's text, teacher-forced (none: the model
    writes it greedily, and the widget's "Write it" puts that text in its target field); ``stack=`` the attention
    stack first shown, ``encoder``, ``decoder`` or ``cross`` (the widget's stack picker chooses another).
    """
    from .widget import AttnScope

    value = image_value(image)
    svc = service_for(model, tokenizer, checkpoint)
    return AttnScope(
        svc,
        text or "",
        image=value,
        messages=messages,
        layer=layer,
        head=head,
        causal=causal,
        scaled=scaled,
        audio=audio_value(audio),
        target=target or "",
        stack=stack or "",
    )
