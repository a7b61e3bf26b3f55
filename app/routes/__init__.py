"""The HTTP routes, one module per resource, each with its schemas (:mod:`..schemas`) and its
computation (:mod:`..compute`) under the same name. Every route module is built alike,
``make_router(max_text_chars)``, and :func:`api_routers` lists them all, in one place."""

from __future__ import annotations

from fastapi import APIRouter

from ..schemas.common import TEXT_CHARS
from ..schemas.subject import parts_of
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


def subject_routes() -> dict[str, list[str]]:
    """Each route that reads a JSON body, by its path: the parts of the subject its request schema takes
    (:func:`~attnscope.app.schemas.subject.parts_of`). The page reads the same table from the OpenAPI document
    (frontend/js/subject.js ``routesOf``); the notebook widget is handed this one."""
    routes = (route for router in api_routers(TEXT_CHARS) for route in router.routes)
    bodies = ((route.path, getattr(route, "body_field", None)) for route in routes)
    return {path: parts_of(body.field_info.annotation) for path, body in bodies if body is not None}
