"""A request's subject, resolved once: what the model reads, as it reads it.

Every request schema composes :class:`~attnscope.app.schemas.subject.Subject` (``text`` or
``messages``, ``add_generation_prompt``, ``stack``, ``target``, ``audio``) and the parts its route takes
(``image``, the what-ifs); :func:`subject_of` turns it into a :class:`Prompt`, and nothing else does: the
ids, their display strings and character ranges, the backend to run them on (with an image: the model's,
the image bound to every pass), the what-ifs as the :class:`~attnscope.model.options.AttentionOptions`
every pass takes, and what the answer adds for the subject (``token_kinds`` and ``image`` with an image;
``token_kinds`` and ``spans`` with a conversation). A route gets its prompt from the dependency
:func:`attnscope.app.deps.subject_dep`, the command line and the notebook by calling :func:`subject_of`;
the compute functions take it resolved. A part the model cannot take is a 422 naming it, before any computing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..model.chat import ChatError
from ..model.inspection import scale_divisor
from ..model.options import AttentionOptions
from .audio import no_audio, recording_of, with_timing
from .compute.checks import ablate_set, check_token_count, check_token_id, knockout_edges, position_of
from .errors import ApiError
from .images import image_answer, image_prompt
from .service import Service


@dataclass
class Prompt:
    """A subject as the model receives it (see the module's docstring)."""

    ids: list[int]
    tokens: list[str]
    offsets: list[list[int]]
    backend: Any
    adds: dict[str, Any] = field(default_factory=dict)  # what the answer adds: token_kinds, image, spans
    stack: str = "decoder"  # the attention stack looked at: the model's "decoder", or an encoder's "encoder"
    opts: AttentionOptions = field(default_factory=AttentionOptions)  # the request's what-ifs, checked
    started: float = field(default_factory=time.perf_counter)  # when resolving began: the answer's timing_ms counts it

    @property
    def n_keys(self) -> int:
        """How many keys the stack's rows have: the source's on an encoder-decoder's cross stack, else the ids'."""
        return len(self.adds["source_ids"]) if self.stack == "cross" else len(self.ids)

    @property
    def kinds(self) -> list[str] | None:
        return self.adds.get("token_kinds")

    @property
    def spans(self) -> list[dict[str, Any]] | None:
        return self.adds.get("spans")


def subject_of(svc: Service, req, text: str = "text", messages: str | None = "messages") -> Prompt:
    """The subject of ``req`` (its ``text`` or ``messages``, ``add_generation_prompt``, ``image``, ``audio``,
    ``stack``, ``target`` and what-ifs), resolved against the model. ``text``, ``messages``: the fields'
    names in a request with two subjects (patching's ``clean`` / ``clean_messages`` and ``corrupt`` /
    ``corrupt_messages``; the two texts' ``text_b``, without messages): the image and the recording belong
    to the first (``text``) alone."""
    started = time.perf_counter()
    stack = stack_of(svc, getattr(req, "stack", None))
    target = getattr(req, "target", None)
    if target is not None and svc.loaded.facts.architecture != "encoder-decoder":
        msg = f"target is the text of a decoder over a source; {svc.loaded.facts.name} has none (send text only)"
        raise ApiError(422, msg, loc=("body", "target"), type_="target_unsupported")
    first = text == "text"
    audio = getattr(req, "audio", None) if first else None
    if audio is not None or svc.info.get("audio"):
        got = heard_prompt(svc, audio, getattr(req, "spectrogram", False))
    else:
        got = prompt_of(
            svc,
            text=getattr(req, text),
            messages=getattr(req, messages, None) if messages else None,
            add_generation_prompt=getattr(req, "add_generation_prompt", None),
            image=getattr(req, "image", None) if first else None,
            names=(text, messages or text),
        )
    got.stack = stack
    if svc.loaded.facts.architecture == "encoder-decoder":
        got = with_target(svc, got, target)
        if audio is not None:
            with_timing(svc, got, req)
    got.opts, got.started = options_of(svc, req, got), started
    return got


def options_of(svc: Service, req, prompt: Prompt | None = None) -> AttentionOptions:
    """The what-ifs ``req`` composes (:class:`~attnscope.app.schemas.subject.WhatIfs`: ``causal``, ``scale``,
    ``ablate``, ``edges``; or :class:`~attnscope.app.schemas.subject.Ablate` alone), checked against the model (a
    422 naming an ``ablate`` entry the model lacks) and the edges against ``prompt``, the subject's tokens; a
    request without them runs the model as trained."""
    facts = svc.loaded.facts
    scale = getattr(req, "scale", "model")
    return AttentionOptions(
        causal=getattr(req, "causal", True),
        divisor=scale_divisor(scale, facts.head_dim),
        ablate=ablate_set(getattr(req, "ablate", None) or (), facts),
        knockout=edges_of(svc, getattr(req, "edges", None) or (), prompt),
    )


def edges_of(svc: Service, edges, prompt: Prompt | None) -> tuple:
    """The subject's knocked-out ``edges`` checked against its tokens (queries the stack's rows, keys its keys);
    an encoder-decoder's encoder stack knocks none out yet (a 422 naming ``stack``)."""
    if not edges:
        return ()
    if prompt is None:  # a subject not laid out here (a generation's target start) takes no edges
        raise ApiError(422, "edges are not knocked out here", loc=("body", "edges"), type_="edges_unsupported")
    if prompt.stack == "encoder" and svc.loaded.facts.architecture == "encoder-decoder":
        msg = (
            "knockout measures the decoder's guess at a target position: ask the decoder or cross stack (an "
            "encoder's edges are not knocked out yet)"
        )
        raise ApiError(422, msg, loc=("body", "stack"), type_="stack_unsupported")
    return knockout_edges(edges, len(prompt.ids), svc.loaded.facts, prompt.n_keys)


def heard_prompt(svc: Service, value: str | None, spectrogram: bool = False) -> Prompt:
    """A speech model's source: the request's recording through the model's feature extractor, bound to the
    backend (:meth:`~attnscope.model.speech.backend.WhisperBackend.hearing`); its tokens are the encoder's
    frames' times, and the answer adds ``audio``."""
    if value is None:
        no_audio(svc)
    recording = recording_of(svc, value)  # a 422 naming audio first, on a model that does not hear
    backend = svc.loaded.backend
    ear = backend.ear
    heard = ear.hear(recording, next(backend.model.parameters()).dtype, backend.device)
    bound = backend.hearing(heard)
    ids = bound.source_ids()
    return Prompt(ids, ear.source_tokens(), [[0, 0]] * len(ids), bound, {"audio": ear.about(heard, spectrogram)})


def with_target(svc: Service, source: Prompt, target: str | None) -> Prompt:
    """An encoder-decoder's subject: ``source`` (the text) and the decoder's target, typed (teacher-forced
    after the decoder start) or, without one, written by the model greedily; the prompt's ids are the
    stack's query side and its backend the model with both bound (:class:`~attnscope.model.families.target.
    TargetBound`)."""
    backend = source.backend  # the model's, or with a recording bound (a speech model)
    generated = target is None
    if generated:
        ids = backend.write(source.ids)
        target, offsets = written_text(svc, ids, len(backend.decoder_start()))
    else:
        ids, offsets = backend.read_target(target)
    # the decoder's context: the model's, or a shorter decoder's own (Whisper's 448 tokens beside 1,500 frames)
    limit = getattr(backend, "target_limit", None) or svc.loaded.facts.block_size
    if len(ids) > limit:
        msg = f"target is {len(ids)} tokens with the decoder start; the decoder's context is {limit} tokens"
        ctx = {"limit": limit, "count": len(ids)}
        raise ApiError(422, msg, loc=("body", "target"), type_="too_many_tokens", ctx=ctx)
    tokens = [svc.displays[i] for i in ids]
    adds = dict(source.adds) | {
        "source_tokens": source.tokens,
        "target_tokens": tokens,
        "source_ids": source.ids,
        "target_ids": ids,
        "target": target,
        "target_generated": generated,
    }
    bound = backend.with_target(source.ids, ids, source.stack)
    if source.stack == "encoder":
        return Prompt(source.ids, source.tokens, source.offsets, bound, adds, source.stack)
    return Prompt(ids, tokens, [list(o) for o in offsets], bound, adds, source.stack)


def stack_of(svc: Service, asked: str | None) -> str:
    """The stack a request looks at: ``asked`` when the model has it (else a 422 naming ``stack``), by
    default the model's decoder, else its encoder."""
    names = [s["name"] for s in svc.loaded.facts.stacks]
    if asked is None:
        return "decoder" if "decoder" in names else names[0]
    if asked not in names:
        msg = f"stack {asked!r}: {svc.loaded.facts.name} has {' and '.join(names)} attention only"
        raise ApiError(422, msg, loc=("body", "stack"), type_="stack_missing", ctx={"stacks": names})
    return asked


def first_mask(svc: Service, ids: list[int]) -> int | None:
    """On an encoder, the first mask token's position (a route's default ``position``); else None (the last)."""
    tokenizer = svc.loaded.tokenizer
    mask = getattr(tokenizer, "mask_token", None)
    mask_id = tokenizer.tk.token_to_id(mask) if mask and svc.loaded.facts.architecture == "encoder" else None
    return ids.index(mask_id) if mask_id is not None and mask_id in ids else None


def decoder_only(svc: Service, what: str, name: str) -> None:
    """A 422 naming the request's field ``name`` where ``what`` (a view that reads the next-token logits) is
    asked of an encoder, whose head guesses the token at each position instead."""
    facts = svc.loaded.facts
    if facts.architecture != "encoder":
        return
    msg = (f"{what} is not defined for an encoder yet: {facts.name}'s masked-LM head guesses the token at each "
           "position, not the next one")
    raise ApiError(422, msg, loc=("body", name), type_="encoder_unsupported")


def single_stack(svc: Service, what: str, why: str = "") -> None:
    """A 422 naming ``stack`` where ``what`` (a view not worked out over two sides yet) is asked of an
    encoder-decoder; ``why`` says what it would take."""
    facts = svc.loaded.facts
    if facts.architecture != "encoder-decoder":
        return
    msg = (f"{what} is not shown for an encoder-decoder yet ({facts.name}){why}: attention, the heads grid, head "
           "effects, rollout, selection, generation, the lens, knockout, direct and QK attribution and patching are")
    raise ApiError(422, msg, loc=("body", "stack"), type_="seq2seq_unsupported")


def prompt_of(
    svc: Service,
    text: str | None,
    messages: list | None = None,
    add_generation_prompt: bool | None = None,
    image: str | None = None,
    names: tuple[str, str] = ("text", "messages"),
) -> Prompt:
    """A text (with ``image``: laid out as the model's processor lays them out) or a conversation
    (laid out by the model's chat template); refused, naming the field, when it has no tokens or
    more than the context."""
    lm = svc.loaded
    if messages is not None:
        return _conversation(svc, messages, add_generation_prompt, image is not None, names[1])
    name = names[0]
    if image is None:
        enc = lm.tokenizer.encode(text)
        got = Prompt(enc.ids, enc.tokens, [list(o) for o in enc.offsets], lm.backend)
    else:
        vp, tokens, offsets = image_prompt(svc, text, image)
        adds = {"token_kinds": vp.kinds, "image": image_answer(vp)}
        got = Prompt(vp.ids, tokens, offsets, lm.backend.with_image(vp), adds)
    try:
        check_token_count(len(got.ids), lm.facts, got.offsets, got.kinds)
    except ApiError as e:
        if e.detail[0]["loc"] == ["body", "text"]:  # the text's own field by its name; an image stays named
            e.detail[0]["loc"] = ["body", name]
            e.detail[0]["msg"] = e.detail[0]["msg"].replace("text", name, 1)
        raise
    return got


def _conversation(svc: Service, messages: list, add_generation_prompt: bool | None, image: bool, name: str) -> Prompt:
    """``messages`` through the model's chat template (:class:`~attnscope.model.chat.ChatTemplate`)."""
    lm = svc.loaded
    loc = ("body", name)
    template = lm.backend.chat_template
    if template is None:
        msg = f"{name} were sent, but {lm.facts.name} has no chat template; send text"
        raise ApiError(422, msg, loc=loc, type_="chat_unsupported")
    if image:
        msg = f"{name} and image together are not shown yet; send the image with text"
        raise ApiError(422, msg, loc=loc, type_="chat_with_image")
    turns = [{"role": m.role, "content": m.content} for m in messages]
    if add_generation_prompt is None:  # the model answers next unless the assistant spoke last
        add_generation_prompt = turns[-1]["role"] != "assistant"
    try:
        chat = template.layout(lm.tokenizer, turns, add_generation_prompt)
    except ChatError as e:
        raise ApiError(422, f"{name}: {e}", loc=loc, type_="chat_template_refused") from None
    n, limit = len(chat.ids), lm.facts.block_size
    if n == 0:
        raise ApiError(422, f"{name} give no tokens through the chat template", loc=loc, type_="text_no_tokens")
    if n > limit:
        msg = f"{name} are {n} tokens through the chat template; the model's context is {limit} tokens"
        raise ApiError(422, msg, loc=loc, type_="too_many_tokens", ctx={"limit": limit, "count": n})
    adds = {"token_kinds": chat.kinds, "spans": chat.spans}
    return Prompt(chat.ids, chat.tokens, chat.offsets, lm.backend, adds)


def written_text(svc: Service, ids: list[int], start: int) -> tuple[str, list[tuple[int, int]]]:
    """A written target's text (its tokens after the decoder start, decoded) and each token's character range
    in it: the text grows by the decoding of one more token at a time (the start and special tokens: empty)."""
    tokenizer = svc.loaded.tokenizer
    offsets, text = [(0, 0)] * start, ""
    for n in range(start + 1, len(ids) + 1):
        now = tokenizer.decode(ids[start:n])
        grown = now if now.startswith(text) else text  # a piece that changes the text before it: shown empty
        offsets.append((len(text), len(grown)))
        text = grown
    return text, offsets


def target_of(svc: Service, req, prompt: Prompt) -> int:
    """The position a request about its subject's ``prompt`` asks about, its ``token_id`` checked."""
    asked = req.position if req.position is not None else first_mask(svc, prompt.ids)
    # an encoder-decoder's position is a target token's (the decoder's guess there), whichever the stack
    position = position_of(asked, len(prompt.adds.get("target_ids", prompt.ids)))
    check_token_id(req.token_id, "token_id", svc.loaded.facts)
    return position
