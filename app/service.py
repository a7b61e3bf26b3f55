"""The loaded service: a model plus what is computed once for it (its description, the display
string of every token, the head role scores). The routes, the notebook and ``attnscope inspect``
compute over a :class:`Service`; :mod:`attnscope.app.lifespan` builds the server's at startup."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..model.backends import LoadedModel
from ..model.fields.table import LAYER_KINDS, field_table
from ..model.heads import ROLES, role_scores
from ..model.jlens.lensfile import JacobianLens
from .responses import dumps
from .schemas.attention import MAX_AUDIO_BYTES, MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS, MAX_MATRIX_CELLS, REGION_MAX
from .schemas.generation import MAX_NEW_TOKENS
from .settings import CHARS_PER_TOKEN


@dataclass
class Service:
    """A loaded model plus what is computed once: its description, token labels, head roles."""

    loaded: LoadedModel
    info: dict[str, Any]
    info_json: bytes
    displays: list[str]
    heads_json: bytes | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    fuse: bool = False  # the statistics' block passes compiled (settings.compile)
    jlens: JacobianLens | None = None  # a fitted Jacobian lens (--jlens), checked to fit this model

    @property
    def max_matrix_cells(self) -> int:
        return self.info["limits"]["max_matrix_cells"]


def checkpoint_label(path: Path) -> str:
    """The checkpoint as shown to clients: relative to the working directory, else its name
    (a model blob of Ollama's: the model's ``NAME:TAG``)."""
    if Path(path).parent.name == "blobs":
        from ..model.sources.ollama import ollama_name_of

        name = ollama_name_of(Path(path))
        if name:
            return f"ollama:{name}"
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return Path(path).name


def model_info(lm: LoadedModel) -> dict[str, Any]:
    """The model's facts (family, heads, key/value heads, divisor, context, dtype, device, ...)."""
    facts = lm.facts
    return {
        **facts.to_dict(),
        "checkpoint": checkpoint_label(lm.path),
        "training": lm.training or {},
        "fields": field_table(),
        "layer_kinds": LAYER_KINDS,
    }


def subject_parts(facts, audio: bool) -> list[str]:
    """The parts of a request's subject the model takes (/api/model ``subject``)."""
    if audio:
        return ["audio", "target"]
    return [
        "text",
        *(["messages"] if facts.chat else []),
        *(["image"] if facts.vision else []),
        *(["target"] if facts.architecture == "encoder-decoder" else []),
    ]


def head_roles(lm: LoadedModel) -> dict[str, Any]:
    facts = lm.facts
    scores = role_scores(lm.backend.patterns, lm.tokenizer, facts.vocab_size, facts.block_size)  # (L, nh, 4)
    return {"roles": list(ROLES), "scores": facts.by_number(np.round(scores.double().numpy(), 4).tolist())}


def build_service(
    lm: LoadedModel,
    with_heads: bool = True,
    limits: dict[str, int] | None = None,
    image_limits: dict[str, int] | None = None,
    audio_bytes: int = MAX_AUDIO_BYTES,
    jlens: JacobianLens | None = None,
) -> Service:
    """The model and what is computed once. ``limits``: the server's (``max_text_chars``,
    ``max_matrix_cells``), shown in the model's description; unset: the defaults. ``image_limits``
    (``max_bytes``, ``max_pixels``): an image-text model's, unset: the defaults; ``audio_bytes``: a speech
    model's largest recording (its ``max_seconds`` is the model's window). ``jlens``: a Jacobian
    lens already checked to fit the model (:func:`model.jlens.lensfile.check_fits`)."""
    info = model_info(lm)
    default_images = {"max_bytes": MAX_IMAGE_BYTES, "max_pixels": MAX_IMAGE_PIXELS}
    info["image_limits"] = (image_limits or default_images) if lm.facts.vision else None
    ear = getattr(lm.backend, "ear", None)  # a speech model's (model.speech.features.Ear)
    info["audio"] = ear is not None
    info["audio_limits"] = {"max_bytes": audio_bytes, "max_seconds": ear.max_seconds} if ear else None
    info["alignment_heads"] = getattr(lm.backend, "named_heads", None)
    info["subject"] = subject_parts(lm.facts, ear is not None)
    info["jlens"] = jlens.about() if jlens is not None else None
    text_chars = max(16000, CHARS_PER_TOKEN * lm.facts.block_size)  # as Settings.text_limit() for this model
    info["limits"] = {
        "max_text_chars": text_chars,
        "max_matrix_cells": MAX_MATRIX_CELLS,
        "region_max": REGION_MAX,
        "max_new_tokens": MAX_NEW_TOKENS,
        **(limits or {}),
    }
    tok = lm.tokenizer
    svc = Service(
        loaded=lm,
        info=info,
        info_json=dumps(info),
        displays=[tok.display(i) if i < tok.vocab_size else f"<{i}>" for i in range(lm.facts.vocab_size)],
        jlens=jlens,
    )
    if with_heads:
        svc.heads_json = dumps(head_roles(lm))
    return svc
