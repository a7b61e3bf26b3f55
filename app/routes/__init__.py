"""The HTTP routes, one module per resource, each with its schemas (:mod:`..schemas`) and its
computation (:mod:`..compute`) under the same name. Every route module is built alike,
``make_router(max_text_chars)``, and :func:`api_routers` lists them all, in one place."""

from __future__ import annotations

from fastapi import APIRouter

from . import (
    atlas,
    attention,
    attribution,
    compare,
    effects,
    generation,
    health,
    knockout,
    lens,
    lessons,
    model,
    neuron,
    patching,
    qk_attribution,
    rollout,
    selection,
    texts,
)

RESOURCES = (
    health,
    model,
    attention,
    lessons,
    effects,
    generation,
    rollout,
    texts,
    neuron,
    selection,
    lens,
    attribution,
    knockout,
    patching,
    qk_attribution,
    atlas,
    compare,
)


def api_routers(max_text_chars: int) -> list[APIRouter]:
    """Every resource's router, in the order the API document lists them."""
    return [resource.make_router(max_text_chars) for resource in RESOURCES]
