"""Who asked for the work in hand and by when: set by the front for each request it answers (bionemo_serving/fronts/
admission.py), read by the engine's scheduler, which refuses at once what cannot finish by then."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass

ANONYMOUS = "anonymous"
"""The client of work no front named one for (the engine called directly)."""


@dataclass(frozen=True)
class Caller:
    client: str
    """Who is served fairly against whom: `X-Client-Id` (HTTP header or gRPC metadata), else the peer's address."""
    deadline: float
    """When the answer is due, on the event loop's clock (`loop.time()`)."""
    timeout_s: float
    """How long the request had from its arrival: the server's limit, or the client's own where shorter."""

    @classmethod
    def from_now(cls, client: str, timeout_s: float) -> Caller:
        return cls(client, asyncio.get_running_loop().time() + timeout_s, timeout_s)

    def remaining_s(self) -> float:
        return self.deadline - asyncio.get_running_loop().time()


CALLER: ContextVar[Caller | None] = ContextVar("bionemo_caller", default=None)
"""The caller of the request this task answers; None outside a front (the engine called directly, in tests)."""
