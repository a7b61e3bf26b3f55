"""What ``POST /api/head-effects`` and ``POST /api/generate`` compute, over a loaded model.

Both check the request against the model first (a 422 naming the field and the limit), then
run :mod:`model.ablation`. Generation is a Python generator of NDJSON lines: the route pulls one
line at a time in a worker thread, so each token goes out as soon as it is produced and a
client that hangs up stops the work at the next token.
"""

from __future__ import annotations

import codecs
import os
import time
from collections.abc import Iterator

import numpy as np

from ..model.ablation import Done, eos_ids, generate, head_effects
from ..model.gpt import AttentionOptions
from .errors import ApiError
from .responses import dumps
from .schemas_ablation import TOP_GUESSES, GenerateRequest, HeadEffectsRequest
from .service import PATTERN_DECIMALS, Service, ablate_set, floor_sig, round_fixed, round_sig


def _prompt_ids(svc: Service, text: str, allow_full: bool) -> list[int]:
    """The text's token ids, refused when empty or longer than the context."""
    ids = svc.loaded.tokenizer.encode_ids(text)
    limit = svc.loaded.facts.block_size
    if not ids:
        raise ApiError(422, "text has no tokens", loc=("body", "text"), type_="text_no_tokens")
    if len(ids) > limit or (len(ids) == limit and not allow_full):
        raise ApiError(
            422,
            f"text is {len(ids)} tokens; the model's context is {limit} tokens",
            loc=("body", "text"),
            type_="too_many_tokens",
            ctx={"limit": limit, "count": len(ids)},
        )
    return ids


def _in_range(value: int, n: int, name: str, what: str) -> None:
    if value >= n:
        raise ApiError(
            422,
            f"{name} is {value}; {what} (0 to {n - 1})",
            loc=("body", name),
            type_="index_out_of_range",
            ctx={"limit": n - 1, "value": value},
        )


# ------------------------------------------------------------------ head effects


def head_effects_json(svc: Service, req: HeadEffectsRequest, started: float | None = None) -> bytes:
    """The POST /api/head-effects answer: every head switched off alone, in batched passes."""
    t0 = time.perf_counter() if started is None else started
    facts = svc.loaded.facts
    ids = _prompt_ids(svc, req.text, allow_full=True)
    position = len(ids) - 1 if req.position is None else req.position
    _in_range(position, len(ids), "position", f"the text has {len(ids)} tokens")
    if req.token_id is not None:
        _in_range(req.token_id, facts.vocab_size, "token_id", f"the model has {facts.vocab_size} tokens")
    base = AttentionOptions(ablate=ablate_set(req.ablate, facts))
    eff = head_effects(svc.loaded.backend, ids, position, req.token_id, mode=req.ablation, base=base)
    body = {
        "position": eff.position,
        "token_id": eff.token_id,
        "token": svc.displays[eff.token_id],
        "logprob": float(round_sig(eff.logprob)),
        "prob": float(round_sig(np.exp(eff.logprob))),
        "ablation": req.ablation,
        "ablate": [{"layer": ref.layer, "head": ref.head} for ref in req.ablate],
        "delta": round_sig(eff.delta.numpy()).tolist(),
        "timing_ms": round((time.perf_counter() - t0) * 1000, 3),
    }
    return dumps(body)


# ------------------------------------------------------------------ generation


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


def start_generation(svc: Service, req: GenerateRequest) -> Iterator[bytes]:
    """Checks the request now (a 422 before any line is sent), then returns the lines to stream:
    one JSON object per new token, then ``{"done": true, ...}``, each ending in a newline."""
    facts = svc.loaded.facts
    ids = _prompt_ids(svc, req.text, allow_full=True)
    opts = AttentionOptions(ablate=ablate_set(req.ablate, facts))
    seed = None
    if req.do_sample:
        seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(4), "little")
    return _lines(svc, req, ids, opts, seed)


def _lines(svc: Service, req: GenerateRequest, ids: list[int], opts: AttentionOptions, seed: int | None):
    tokenizer = svc.loaded.tokenizer
    pieces = Pieces(tokenizer)
    eos = eos_ids(svc.loaded.backend)  # ends the text; not part of it
    steps = generate(
        svc.loaded.backend,
        ids,
        req.max_new_tokens,
        do_sample=req.do_sample,
        temperature=req.temperature,
        top_k=req.top_k,
        seed=seed or 0,
        opts=opts,
        top_n=TOP_GUESSES,
    )
    for item in steps:
        if isinstance(item, Done):
            line = {
                "done": True,
                "text": req.text + pieces.rest(),
                "reason": item.reason,
                "tokens": len(item.generated),
                "seed": seed,
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
            "attention": round_fixed(item.attention, PATTERN_DECIMALS),
        }
        yield dumps(line) + b"\n"
