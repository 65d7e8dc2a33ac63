"""Request bodies above a bound are refused with 413 before the route sees them: by their Content-Length when they
state one, else (chunked) once what arrived passes the bound. The bound is the gRPC port's (--max-request-mb):
one limit for a request whatever port it comes through."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.http.errors import HttpError, error_response


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self._app = app
        self._max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        stated = dict(scope["headers"]).get(b"content-length")
        if stated is not None and stated.isdigit() and int(stated) > self._max_bytes:
            await self._refuse(scope, receive, send)
            return
        # The whole body is read here (at most the bound), then handed on: the route reads it from memory.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_bytes:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                # What the application reads after the body: the client going away, as the server reports it.
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self._app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = HttpError(
            413,
            "REQUEST_TOO_LARGE",
            f"the request body is larger than this server accepts ({self._max_bytes} bytes, --max-request-mb)",
        )
        await error_response(refusal)(scope, receive, send)
