"""Answers compressed as the client accepts them: zstd where it says so, else gzip, else as they are.

The page's answers are mostly base64 float32, which neither codec shrinks much (about 2x), and at
a thousand tokens an answer is 10-14 MB. gzip at level 1 takes 200-400 ms for that, longer than the
whole computation on a GPU (an H100 computed a 1,024-token GPT-2 page answer in 106 ms and gzip
took 205 ms more); zstd at level 1 takes a tenth of that time for an equal or smaller body.
Chromium (123+) and Firefox (126+) ask for zstd from a secure origin: HTTPS, or ``localhost`` and
``127.0.0.1`` over plain HTTP (where ``attnscope serve`` listens by default). Over plain HTTP on
another address Chromium asks for ``gzip, deflate`` only (seen with Chromium 156), so a server shared
on a network gets zstd back behind a proxy that ends TLS (docs/DEPLOY.md says so). httpx asks for zstd where
``zstandard`` is installed. Every other client gets gzip, as before.

Starlette's ``GZipMiddleware`` picks a responder per request; this middleware does the same with
one more responder, built on Starlette's ``IdentityResponder`` (which handles small bodies,
streaming bodies, excluded content types and answers that set their own ``Content-Encoding``).
"""

from __future__ import annotations

import anyio
import anyio.lowlevel
import anyio.to_thread
from starlette.datastructures import Headers
from starlette.middleware.gzip import GZipResponder, IdentityResponder
from starlette.types import ASGIApp, Receive, Scope, Send

try:
    import zstandard
except ImportError:  # pragma: no cover - a base requirement; gzip still serves without it
    zstandard = None

GZIP_LEVEL = 1  # numeric JSON: level 1 is ~5x smaller already, and several times faster than 6
ZSTD_LEVEL = 1  # 11 MB of base64 float32: 34 ms to 6.1 MB, against gzip level 1's 423 ms to 6.4 MB
THREAD_MINIMUM = 128 << 10  # bodies this large are compressed in a worker thread, off the event loop
THREADS = 40  # compressing threads at once: a limiter of their own, as Starlette's gzip has, so that
# compressing never takes the threads the routes compute in
_limiter: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar("attnscope_zstd_limiter")


def compression_limiter() -> anyio.CapacityLimiter:
    """The event loop's limiter for compressing threads (one per loop, made on first use)."""
    try:
        return _limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(THREADS)
        _limiter.set(limiter)
        return limiter


def accepted(header: str) -> set[str]:
    """The codings an ``Accept-Encoding`` header accepts (those without ``q=0``), lower case."""
    codings = set()
    for part in header.split(","):
        name, *params = (p.strip() for p in part.split(";"))
        q = next((p.partition("=")[2] for p in params if p.lower().startswith("q=")), "1")
        try:
            weight = float(q)
        except ValueError:
            weight = 0.0
        if name and weight > 0:
            codings.add(name.lower())
    return codings


class ZstdResponder(IdentityResponder):
    """One zstd frame per answer; a streamed answer is flushed block by block as it goes."""

    content_encoding = "zstd"

    def __init__(self, app: ASGIApp, minimum_size: int, level: int = ZSTD_LEVEL) -> None:
        super().__init__(app, minimum_size)
        self.compressor = zstandard.ZstdCompressor(level=level)
        self.stream = None  # a ZstdCompressionObj once a streamed body begins

    async def apply_compression(self, body: bytes, *, more_body: bool) -> bytes:
        if len(body) >= THREAD_MINIMUM:
            return await anyio.to_thread.run_sync(self.compress, body, more_body, limiter=compression_limiter())
        return self.compress(body, more_body)

    def compress(self, body: bytes, more_body: bool) -> bytes:
        if self.stream is None and not more_body:
            return self.compressor.compress(body)  # the whole answer: one frame that states its size
        if self.stream is None:
            self.stream = self.compressor.compressobj()
        mode = zstandard.COMPRESSOBJ_FLUSH_BLOCK if more_body else zstandard.COMPRESSOBJ_FLUSH_FINISH
        return self.stream.compress(body) + self.stream.flush(mode)


class CompressionMiddleware:
    """zstd, gzip or identity, by the request's ``Accept-Encoding``; bodies under ``minimum_size`` as they are."""

    def __init__(self, app: ASGIApp, minimum_size: int = 1024) -> None:
        self.app = app
        self.minimum_size = minimum_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        codings = accepted(Headers(scope=scope).get("accept-encoding", ""))
        responder: ASGIApp
        if "zstd" in codings and zstandard is not None:
            responder = ZstdResponder(self.app, self.minimum_size)
        elif "gzip" in codings:
            responder = GZipResponder(self.app, self.minimum_size, compresslevel=GZIP_LEVEL)
        else:
            responder = IdentityResponder(self.app, self.minimum_size)
        await responder(scope, receive, send)
