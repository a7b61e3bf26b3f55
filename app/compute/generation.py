"""What ``POST /api/generate`` computes: the text continued token by token
(:func:`attnscope.model.ablation.generate`), as NDJSON lines.

The request is checked first (a 422 naming the field and the limit, before any line); then a
Python generator yields one line per new token, so the route can send each token as soon as it
is produced, and a client that hangs up stops the work at the next token.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator

import numpy as np
import torch

from ...model.ablation import Done, eos_ids, generate
from ...model.options import AttentionOptions
from ..errors import ApiError
from ..responses import dumps
from ..schemas.generation import TOP_GUESSES, GenerateRequest
from ..service import Service
from ..subject import Prompt, decoder_only, heard_prompt, options_of, prompt_of, subject_of
from .rounding import PATTERN_DECIMALS, floor_sig, round_fixed


class Pieces:
    """The characters each new token adds to the text: its bytes through an incremental UTF-8
    decoder, so a character split over tokens comes out with its last piece (bytes that can
    never form a character come out as U+FFFD at once)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""

    def add(self, token_id: int) -> str:
        piece = self.decoder.decode(self.tokenizer.token_bytes(token_id))
        self.text += piece
        return piece

    def rest(self) -> str:
        """Everything generated, an incomplete last character included."""
        return self.text + self.decoder.decode(b"", final=True)


def start_generation(svc: Service, req: GenerateRequest, prompt: Prompt) -> Iterator[bytes]:
    """Checks the request now (a 422 before any line is sent), then returns the lines to stream:
    one JSON object per new token, then ``{"done": true, ...}``, each ending in a newline. ``prompt``: where
    the text starts (:func:`generation_subject`)."""
    facts = svc.loaded.facts
    decoder_only(svc, "writing tokens", "max_new_tokens")
    opts = prompt.opts
    implicit = sorted({layer for layer, _ in opts.ablate if facts.layers[layer].get("implicit")})
    if implicit:  # a new token runs the mixer's recurrent step, which is not switched off
        raise ApiError(
            422,
            f"ablate names heads of the implicit layers {implicit}: writing tokens with them switched off is not "
            "built (each new token runs the mixer's recurrent step)",
            loc=("body", "ablate"),
            type_="implicit_generation",
        )
    seed = None
    if req.do_sample:
        seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(4), "little")
    return _lines(svc, req, prompt, opts, seed)


def generation_subject(svc: Service, req: GenerateRequest) -> Prompt:
    """The subject a generation continues: the request's (:func:`~attnscope.app.subject.subject_of`), or on an
    encoder-decoder the target from its start (:func:`target_start`), with the request's what-ifs."""
    if svc.loaded.facts.architecture != "encoder-decoder":
        return subject_of(svc, req)
    prompt = target_start(svc, req)
    prompt.opts = options_of(svc, req)
    return prompt


def target_start(svc: Service, req: GenerateRequest) -> Prompt:
    """An encoder-decoder's generation: the text is the source, and the target starts from the decoder start
    token (and ``target``, teacher-forced, when given); each line then adds the new token's cross rows."""
    audio = getattr(req, "audio", None)
    if audio is not None or svc.info.get("audio"):  # a speech model: the recording is the source
        source = heard_prompt(svc, audio)
    else:
        source = prompt_of(svc, req.text, req.messages, req.add_generation_prompt)
    backend = source.backend  # the model's, or with the recording bound
    ids = backend.read_target(req.target)[0] if req.target is not None else backend.decoder_start()
    adds = {"source_tokens": source.tokens, "source_ids": source.ids, "target_ids": ids}
    return Prompt(ids, [svc.displays[i] for i in ids], [], backend.with_target(source.ids, ids, "decoder"), adds)


def _lines(svc: Service, req: GenerateRequest, prompt: Prompt, opts: AttentionOptions, seed: int | None):
    tokenizer = svc.loaded.tokenizer
    pieces = Pieces(tokenizer)
    eos = eos_ids(svc.loaded.backend)  # ends the text; not part of it
    steps = generate(
        prompt.backend,
        prompt.ids,
        req.max_new_tokens,
        do_sample=req.do_sample,
        temperature=req.temperature,
        top_k=req.top_k,
        top_p=req.top_p,
        seed=seed or 0,
        opts=opts,
        top_n=TOP_GUESSES,
    )
    for item in steps:
        if isinstance(item, Done):
            line = {
                "done": True,
                # a conversation: the reply alone; an encoder-decoder: the target
                "text": ((req.target or "") if prompt.adds.get("source_ids") else (req.text or "")) + pieces.rest(),
                "reason": item.reason,
                "tokens": len(item.generated),
                "seed": seed,
                "do_sample": req.do_sample,
                "temperature": req.temperature,
                "top_k": req.top_k,
                "top_p": req.top_p,
            }
            yield dumps(line) + b"\n"
            return
        top_probs = floor_sig(np.asarray(item.top_probs)).tolist()
        line = {
            "step": item.step,
            "token": svc.displays[item.token_id],
            "token_id": item.token_id,
            "piece": "" if item.token_id in eos else pieces.add(item.token_id),
            "prob": float(floor_sig(item.prob)),
            "top": [{"token": svc.displays[i], "id": i, "prob": p} for i, p in zip(item.top_ids, top_probs)],
            "attention": svc.loaded.facts.by_number(round_fixed(item.attention, PATTERN_DECIMALS)),
            # the mean over every attention layer and head, from the unrounded rows: the page's "mean of all heads"
            "attention_mean": round_fixed(item.attention.double().mean((0, 1)), PATTERN_DECIMALS),
        }
        cross = getattr(prompt.backend, "cross_rows", None)
        if cross:  # an encoder-decoder: the new token's row of each cross layer over the source, [layer][head][source]
            line["cross"] = round_fixed(torch.stack(cross).cpu(), PATTERN_DECIMALS)
        if item.step == 1:  # the subject's token kinds, image or spans, once
            line |= prompt.adds
        yield dumps(line) + b"\n"
