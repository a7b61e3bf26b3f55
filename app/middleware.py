"""Pure ASGI middleware that refuses request bodies over a limit with 413.

Checked twice: from ``Content-Length`` before the app runs, and from the bytes actually
received, for chunked bodies (or a ``Content-Length`` that lies). When the stream runs
over, the app's receive call fails; whatever response the app then tries to send is
replaced by the 413, so the answer does not depend on how the app handles that failure.

Before answering 413 the body is read and dropped (up to :data:`DRAIN_MAX` bytes, for at most
:data:`DRAIN_SECONDS`): a client such as Python's ``http.client`` sends the whole body before it
reads the answer, and a server that closes with bytes unread resets the connection, so that client
would see a reset instead of the 413. A client that sent ``Expect: 100-continue`` is answered at once
(reading would ask it for the body), and so is a body declared longer than ``DRAIN_MAX``.
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import body_too_large_item, error_item
from .responses import dumps

DRAIN_MAX = 8 << 20  # bytes of a refused body read and dropped so that its sender reads the 413
DRAIN_SECONDS = 10.0  # and for no longer than this


class BodyTooLarge(Exception):
    """The request body went over the limit while it was being read."""


class BodySizeLimitMiddleware:
    """``upload_paths``: the routes whose requests may carry the model's ``upload_part`` (an image on an
    image-text model, ``audio`` on a speech model); where the model takes one (``upload_body_bytes`` set)
    their limit is ``upload_body_bytes``, every other route's stays, and their 413 names the part and its
    ``upload_max_bytes``."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        upload_paths: frozenset[str] = frozenset(),
        upload_body_bytes: int | None = None,
        upload_max_bytes: int | None = None,
        upload_part: str = "image",
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.upload_paths = upload_paths
        self.upload_body_bytes = upload_body_bytes
        self.upload_max_bytes = upload_max_bytes
        self.upload_part = upload_part

    def _takes_upload(self, scope: Scope) -> bool:
        return self.upload_body_bytes is not None and scope.get("path") in self.upload_paths

    def limit_of(self, scope: Scope) -> int:
        return self.upload_body_bytes if self._takes_upload(scope) else self.max_body_bytes

    def too_large(self, scope: Scope, count: int, read: bool = False) -> dict:
        """The 413's item: naming the image or audio and its limit on a route that takes one."""
        most = self.upload_max_bytes if self._takes_upload(scope) else None
        return body_too_large_item(count, self.limit_of(scope), most, read, self.upload_part)

    def _response(self, status: int, item: dict) -> tuple[Message, Message]:
        body = dumps({"detail": [item]})
        start = {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
        return start, {"type": "http.response.body", "body": body, "more_body": False}

    async def _send_error(self, send: Send, status: int, item: dict) -> None:
        start, body = self._response(status, item)
        await send(start)
        await send(body)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_of(scope)
        headers = dict(scope.get("headers", ()))
        expects_continue = headers.get(b"expect", b"").lower() == b"100-continue"
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    msg = "Content-Length is not a number"
                    ctx = {"limit": limit}
                    await self._send_error(send, 400, error_item("content_length_invalid", ("body",), msg, ctx))
                    return
                if declared > limit:
                    if not expects_continue and declared <= DRAIN_MAX:
                        await _drain(receive, declared)
                    await self._send_error(send, 413, self.too_large(scope, declared))
                    return

        received = 0
        over = False
        ended = False  # the last body message came
        started = False

        async def limited_receive() -> Message:
            nonlocal received, over, ended
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                ended = not message.get("more_body", False)
                if received > limit:
                    over = True
                    raise BodyTooLarge(f"request body over {limit} bytes")
            return message

        async def refuse() -> None:
            if not ended:
                await _drain(receive, DRAIN_MAX - received)
            await self._send_error(send, 413, self.too_large(scope, received, read=True))

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if over:
                # the app answered after its body read failed: answer 413 instead, once
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await refuse()
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            # BodyTooLarge itself, or whatever the app made of it
            if not over:
                raise
            if not started:
                await refuse()


async def _drain(receive: Receive, budget: int) -> None:
    """Read and drop the rest of the request body: at most ``budget`` bytes, for at most DRAIN_SECONDS."""
    read = 0
    with anyio.move_on_after(DRAIN_SECONDS):
        while read < budget:
            message = await receive()
            if message["type"] != "http.request":
                return
            read += len(message.get("body", b""))
            if not message.get("more_body", False):
                return
