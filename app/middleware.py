"""Pure ASGI middleware that refuses request bodies over a limit with 413.

Checked twice: from ``Content-Length`` before the app runs, and from the bytes actually
received, for chunked bodies (or a ``Content-Length`` that lies). When the stream runs
over, the app's receive call fails; whatever response the app then tries to send is
replaced by the 413, so the answer does not depend on how the app handles that failure.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_item
from .responses import dumps


class BodyTooLarge(Exception):
    """The request body went over the limit while it was being read."""


class BodySizeLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    def _response(self, status: int, msg: str, type_: str, count: int | None = None) -> tuple[Message, Message]:
        ctx = {"limit": self.max_body_bytes}
        if count is not None:
            ctx["count"] = count
        body = dumps({"detail": [error_item(type_, ("body",), msg, ctx)]})
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

    async def _send_error(self, send: Send, status: int, msg: str, type_: str, count: int | None = None) -> None:
        start, body = self._response(status, msg, type_, count)
        await send(start)
        await send(body)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._send_error(send, 400, "Content-Length is not a number", "content_length_invalid")
                    return
                if declared > limit:
                    msg = f"the request body is {declared} bytes; the limit is {limit} bytes"
                    await self._send_error(send, 413, msg, "body_too_large", declared)
                    return

        received = 0
        over = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over = True
                    raise BodyTooLarge(f"request body over {limit} bytes")
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if over:
                # the app answered after its body read failed: answer 413 instead, once
                if message["type"] == "http.response.start" and not started:
                    started = True
                    msg = f"the request body is over the limit of {limit} bytes"
                    await self._send_error(send, 413, msg, "body_too_large", received)
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
                msg = f"the request body is over the limit of {limit} bytes"
                await self._send_error(send, 413, msg, "body_too_large", received)
