"""Triton's own metric families in the service's GET /metrics: fetched from Triton's loopback metrics port by the
API worker that answers the scrape and appended to BentoML's answer, so they appear once per scrape whatever the
number of workers."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from starlette.types import ASGIApp, Message, Receive, Scope, Send

TRITON_FETCH_TIMEOUT_S = 0.5
"""How long a scrape waits for Triton's metrics; past it the answer has the service's own and `up` 0."""


def triton_gauges(up: bool, seconds: float) -> bytes:
    """The families that say whether this scrape got Triton's metrics, and how long it waited for them."""
    return (
        "# HELP bionemo_triton_metrics_up Whether this scrape got Triton's metrics (0: Triton did not answer in time)\n"
        "# TYPE bionemo_triton_metrics_up gauge\n"
        f"bionemo_triton_metrics_up {int(up)}\n"
        "# HELP bionemo_triton_metrics_fetch_seconds Seconds this scrape waited for Triton's metrics\n"
        "# TYPE bionemo_triton_metrics_fetch_seconds gauge\n"
        f"bionemo_triton_metrics_fetch_seconds {seconds:.6f}\n"
    ).encode()


class MergeTritonMetrics:
    """ASGI middleware: BentoML's GET /metrics answer, followed by Triton's families fetched by this worker.

    `port` is Triton's metrics port on 127.0.0.1 (None where Triton runs without metrics). Triton's answer is awaited
    at most TRITON_FETCH_TIMEOUT_S; without it the scrape still answers 200 with the service's families.
    """

    def __init__(self, app: ASGIApp, port: int | None) -> None:
        self.app = app
        self.url = f"http://127.0.0.1:{port}/metrics" if port is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/metrics" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        triton = asyncio.ensure_future(self._fetch_triton())  # while BentoML collects the workers' files
        messages: list[Message] = []

        async def keep(message: Message) -> None:
            messages.append(message)

        try:
            await self.app(scope, receive, keep)
        finally:
            triton_text = await triton
        start, *bodies = messages
        if start["status"] != 200:
            for message in messages:
                await send(message)
            return
        body = b"".join(message.get("body", b"") for message in bodies) + triton_text
        headers = [(name, value) for name, value in start["headers"] if name.lower() != b"content-length"]
        await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def _fetch_triton(self) -> bytes:
        """Triton's families and the gauges saying it answered; the gauges alone when it did not, in time."""
        started = time.perf_counter()
        if self.url is None:
            return triton_gauges(False, 0.0)
        try:  # a session per scrape (one every few seconds at most): nothing is left open when the worker stops
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TRITON_FETCH_TIMEOUT_S)) as session:
                async with session.get(self.url) as response:
                    response.raise_for_status()
                    text = await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return triton_gauges(False, time.perf_counter() - started)
        return text.rstrip(b"\n") + b"\n" + triton_gauges(True, time.perf_counter() - started)
