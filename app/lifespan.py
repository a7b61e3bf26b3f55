"""Startup and shutdown of the server: the model loaded once, in ``lifespan``, into :class:`AppState`.

Before the model is loaded ``/readyz`` and the model endpoints answer 503. A checkpoint that
cannot be loaded stops the server with one line (:class:`LifespanErrorMiddleware`), not a traceback.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import torch
from fastapi import FastAPI
from starlette.types import Message, Receive, Scope, Send

from ..model.jlens.lensfile import LensFileError, check_fits, load_lens, resolve_lens
from ..model.ours.checkpoint import CheckpointError
from ..model.registry import load_model
from .compute.atlas import AtlasFolderError, load_atlases
from .compute.attention import compute_attention
from .compute.models import started_with
from .errors import one_line
from .schemas.attention import AttentionRequest
from .service import Service, build_service
from .settings import Settings
from .subject import subject_of

log = logging.getLogger("attnscope")

T = TypeVar("T")


class AppState:
    """What the routes share: settings, the loaded service, the bound on computations at once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.service: Service | None = None
        self.semaphore: anyio.Semaphore | None = None
        self.startup_error: str | None = None
        self.started_with: dict | None = None  # the model the server started with, as GET /api/models lists models
        self.switch: dict | None = None  # a model being loaded in its place: {"name", "status", "error"}
        self.switch_lock = threading.Lock()
        self.switch_job: dict | None = None  # the load running now: {"name", "cancelled", "kind"}, until it ends
        self.second: dict | None = None  # a second model being loaded beside it (compare-models), as ``switch``
        self.second_service: Service | None = None  # that second model, once loaded; kept for later requests
        self.atlases: dict = {}  # id -> model.atlas.read.Atlas, read at start (--atlas DIR)

    @property
    def ready(self) -> bool:
        return self.service is not None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread once a slot is free, so the event loop stays responsive."""
        assert self.semaphore is not None
        async with self.semaphore:
            return await anyio.to_thread.run_sync(fn, *args)


class LifespanErrorMiddleware:
    """Turns a failed startup's traceback into the one line the lifespan recorded."""

    def __init__(self, app, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def send_one_line(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed" and self.state.startup_error:
                message = {**message, "message": self.state.startup_error}
            await send(message)

        await self.app(scope, receive, send_one_line)


def configure_torch(settings: Settings) -> None:
    torch.set_num_threads(settings.threads)


M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
HEAP_MMAP_THRESHOLD = 32 << 20


def limit_heap_retention() -> bool:
    """Serve allocations of 32 MiB and more (large response bodies, whole matrices) from their
    own mappings, returned to the system when freed (glibc only; skipped when the operator set
    ``MALLOC_MMAP_THRESHOLD_``).

    By default glibc raises its mmap threshold to the largest block freed so far, after which
    big buffers come from heaps it keeps and fragments. The threshold stays above a block of
    the capture on the CPU (``model.blocks.BLOCK_BUDGET_BYTES / BLOCK_TEMPORARIES`` = 12 MiB): a block's
    temporaries come and go dozens of times per layer, and from fresh mappings each one costs
    its page faults again; at 4 MiB the page's request at 2,048 tokens on a SmolLM2-135M
    shape took 20.5-23.2 s over HTTP against 13.9-14.5 s at 32 MiB (2 threads). In
    bench/load_test.sh (N=1000 ROUNDS=3, texts up to 256 tokens) the server's RSS after the
    third round was 404 MiB at a 4 MiB threshold, 429 MiB at 16 MiB, 418 MiB at 32 MiB.
    """
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD))
    except (OSError, AttributeError):  # not glibc
        return False


def load_service(settings: Settings) -> Service:
    """The settings' model, loaded, with what is computed once (:func:`build_service`)."""
    jlens = load_lens(resolve_lens(settings.jlens)) if settings.jlens else None  # a bad file stops before the model
    lm = load_model(settings.checkpoint_path, settings.device, settings.dtype, settings.placement())
    if jlens is not None:
        check_fits(jlens, lm.facts)
    limits = {"max_text_chars": settings.text_limit(), "max_matrix_cells": settings.max_matrix_cells}
    svc = build_service(
        lm, limits=limits, image_limits=settings.image_limits(), audio_bytes=settings.max_audio_bytes, jlens=jlens
    )
    if settings.compile:
        svc.fuse = True
        compile_now(svc)
    return svc


class CompileError(RuntimeError):
    """``--compile`` asked for what this machine cannot compile: the server does not start."""


def compile_now(svc: Service) -> None:
    """The compiled statistics made before the first request needs them: the page's first request
    (every head's statistics, and one head's) on a short text, so no one waits for the compiler
    then. A long text's blocks, or a what-if's divisor under 1, compile when first asked for."""
    started = time.perf_counter()
    focus = {"layer": svc.loaded.facts.attention_layers[0], "head": 0, "include": ["stats"]}
    try:
        req = AttentionRequest(text="The cat sat on the mat.", include=["stats"], focus=focus)
        compute_attention(svc, req, subject_of(svc, req))
    except Exception as e:  # no C++ compiler on the CPU, no Triton on the GPU, ...
        raise CompileError(f"--compile (ATTNSCOPE_COMPILE): torch.compile failed: {one_line(e)}") from e
    log.info("attnscope: compiled the statistics' block passes in %.0f s", time.perf_counter() - started)


@asynccontextmanager
async def lifespan(app: FastAPI):
    state: AppState = app.state.attnscope
    settings = state.settings
    configure_torch(settings)
    limit_heap_retention()
    state.semaphore = anyio.Semaphore(settings.concurrency)
    try:
        state.atlases = await anyio.to_thread.run_sync(load_atlases, settings.atlas)
        svc = await anyio.to_thread.run_sync(load_service, settings)
    except (CheckpointError, AtlasFolderError, CompileError, LensFileError) as e:
        # the server logs this one line (LifespanErrorMiddleware) and exits non-zero
        state.startup_error = f"attnscope: cannot start: {one_line(e)}"
        raise
    state.service = svc
    state.started_with = started_with(settings.checkpoint_path, svc.info["name"])
    info = svc.info
    log.info(
        "attnscope: loaded %s (%d layers x %d heads, context %d) on %s; %d torch threads, %d at once",
        info["checkpoint"],
        info["n_layer"],
        info["n_head"],
        info["block_size"],
        info["device"],
        torch.get_num_threads(),
        settings.concurrency,
    )
    del svc, info  # the state holds the model; a switch (POST /api/model) must be able to free it
    try:
        yield
    finally:
        state.service = None
