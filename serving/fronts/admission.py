"""Admission in each API worker: a bound on the requests in flight, and a deadline for each.

Past the bound a request is refused at once (503 with Retry-After) instead of
queueing without limit; a request past its deadline is cancelled (504), its
Triton calls and decode rows with it, while the others go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from serving.errors import DeadlineExceeded, Overloaded
from serving.metrics import IN_FLIGHT

T = TypeVar("T")


class Admission:
    def __init__(self, max_in_flight: int, timeout_s: float) -> None:
        self.max_in_flight, self.timeout_s = max_in_flight, timeout_s
        self.in_flight = 0

    async def run(self, work: Awaitable[T]) -> T:
        """`work`'s result; `Overloaded` when the worker is full, `DeadlineExceeded` when it takes too long."""
        if self.in_flight >= self.max_in_flight:
            if asyncio.iscoroutine(work):
                work.close()  # never started
            raise Overloaded.at(
                "request", f"this worker has {self.in_flight} requests in flight, its limit (BIONEMO_MAX_IN_FLIGHT)"
            )
        self.in_flight += 1
        IN_FLIGHT.inc()
        try:
            async with asyncio.timeout(self.timeout_s):  # in this task: no second task per request, as wait_for makes
                return await work
        except TimeoutError:
            raise DeadlineExceeded.at(
                "request", f"not answered within {self.timeout_s:g} s (BIONEMO_REQUEST_TIMEOUT_S); its work was cancelled"
            ) from None
        finally:
            self.in_flight -= 1
            IN_FLIGHT.dec()
