"""`Server-Timing: total;dur=MS` on every HTTP answer: the milliseconds from the request's head, as this worker read
it, to the answer's head. What the service itself took, apart from the network and the client's own queueing (as
TEI's `x-total-time`); browsers' developer tools show it, and the overload benchmark reads it for each refusal."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"server-timing"


class ServerTiming:
    """ASGI middleware: the `Server-Timing` header on every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                took_ms = (time.perf_counter() - began) * 1000
                headers = [*message.get("headers", ()), (HEADER, f"total;dur={took_ms:.1f}".encode())]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed)
