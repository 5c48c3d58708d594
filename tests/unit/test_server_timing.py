"""`Server-Timing` on every HTTP answer (bionemo_serving/fronts/bentoml/server_timing.py): the time from the
request's head to the answer's, added to the headers the app sent; other scopes pass untouched."""

from __future__ import annotations

import asyncio

from bionemo_serving.fronts.bentoml.server_timing import ServerTiming


def test_an_http_answer_carries_its_time_in_the_service() -> None:
    async def app(scope: dict, receive: object, send: object) -> None:
        await asyncio.sleep(0.05)
        await send({"type": "http.response.start", "status": 503, "headers": [(b"retry-after", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(ServerTiming(app)({"type": "http"}, None, send))
    start, body = sent
    assert start["status"] == 503 and body == {"type": "http.response.body", "body": b"{}"}
    (retry_after, (name, value)) = start["headers"]
    assert retry_after == (b"retry-after", b"2") and name == b"server-timing"
    metric, _, milliseconds = value.decode().partition(";dur=")
    assert metric == "total" and 50 <= float(milliseconds) < 1000


def test_other_scopes_pass_untouched() -> None:
    seen: list[dict] = []

    async def app(scope: dict, receive: object, send: object) -> None:
        await send({"type": "lifespan.startup.complete"})

    async def send(message: dict) -> None:
        seen.append(message)

    asyncio.run(ServerTiming(app)({"type": "lifespan"}, None, send))
    assert seen == [{"type": "lifespan.startup.complete"}]
