"""The HTTP routes, one module per resource, each with its schemas (:mod:`..schemas`) and its
computation (:mod:`..compute`) under the same name. Every route module is built alike,
``make_router(max_text_chars)``, and :func:`api_routers` lists them all, in one place."""

from __future__ import annotations

from fastapi import APIRouter

from . import (
    atlas,
    attention,
    attribution,
    effects,
    generation,
    health,
    knockout,
    lens,
    lessons,
    model,
    patching,
    qk,
    qk_attribution,
    rollout,
    selection,
    two_models,
    two_texts,
)

RESOURCES = (
    health,
    model,
    attention,
    lessons,
    effects,
    generation,
    rollout,
    two_texts,
    qk,
    selection,
    lens,
    attribution,
    knockout,
    patching,
    qk_attribution,
    atlas,
    two_models,
)


def api_routers(max_text_chars: int) -> list[APIRouter]:
    """Every resource's router, in the order the API document lists them."""
    return [resource.make_router(max_text_chars) for resource in RESOURCES]
