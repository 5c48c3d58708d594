"""Admission in each API worker, for every front: who the caller is, its deadline, and its work stopped when it goes.

Each request's deadline is the server's (BIONEMO_REQUEST_TIMEOUT_S), or shorter where the client sends its own: the
`X-Request-Timeout` header (seconds) over HTTP, `x-request-timeout` metadata or the call's deadline over gRPC. Its client, whose work is queued
fairly against other clients' (engine/scheduler.py), is the `X-Client-Id` header (or gRPC metadata), else the
peer's address. The engine refuses at once what cannot finish by the deadline; what still runs past it is cancelled
(504). A client that closes its connection has its request's work cancelled: never started if it waited, stopped
between Triton calls if it ran. Past BIONEMO_MAX_IN_FLIGHT requests in one worker, running or queued, a 503 at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc
from starlette.requests import Request

from bionemo_serving.engine.caller import ANONYMOUS, CALLER, Caller
from bionemo_serving.errors import ClientGone, DeadlineExceeded, InvalidRequest, Overloaded
from bionemo_serving.fronts.bentoml.grpc_server import current_call
from bionemo_serving.metrics import IN_FLIGHT

T = TypeVar("T")

CLIENT_HEADER = "x-client-id"
"""Names the client whose requests are queued together: a tenant, a user, a job (at most MAX_CLIENT_ID characters)."""
TIMEOUT_HEADER = "x-request-timeout"
"""The client's own deadline in seconds, where shorter than the server's."""
MAX_CLIENT_ID = 128
GONE_POLL_S = 0.1


@dataclass(frozen=True)
class Arrival:
    """A request as its transport delivered it."""

    client: str
    timeout_s: float | None
    """The client's own deadline, where it sent one."""
    gone: Callable[[], Awaitable[None]] | None = None
    """Returns once the client has gone (HTTP); None where the transport cancels the call itself (gRPC)."""


def _client_id(sent: str | None, peer: str) -> str:
    if sent is None:
        return peer
    if not sent or len(sent) > MAX_CLIENT_ID or not sent.isprintable():
        raise InvalidRequest.at("X-Client-Id", f"should be 1 to {MAX_CLIENT_ID} printable characters")
    return sent


def _client_timeout(sent: str | None) -> float | None:
    if sent is None:
        return None
    try:
        seconds = float(sent)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidRequest.at("X-Request-Timeout", f"should be a positive number of seconds, not {sent!r}")
    return seconds


def http_arrival(request: Request) -> Arrival:
    """The caller of an HTTP request, from its headers and peer; `gone` waits for its disconnect."""
    peer = request.client.host if request.client else ANONYMOUS

    async def gone() -> None:
        # The body was read: the server answers the next receive with the disconnect, when it comes.
        while (await request.receive())["type"] != "http.disconnect":
            await asyncio.sleep(GONE_POLL_S)  # a server that answers at once with an empty body instead: poll

    return Arrival(_client_id(request.headers.get(CLIENT_HEADER), peer), _client_timeout(request.headers.get(TIMEOUT_HEADER)), gone)


def grpc_arrival(context: grpc.aio.ServicerContext) -> Arrival:
    """The caller of a gRPC call, from its metadata, peer (`ipv4:127.0.0.1:5000`: its host) and deadline: the shorter
    of the call's own and `x-request-timeout` metadata. (BentoML's gRPC server hands its interceptors a context
    wrapped for OpenTelemetry, whose `time_remaining` is not implemented: there the metadata alone says it.)"""
    metadata = {key.lower(): value for key, value in (context.invocation_metadata() or ()) if isinstance(value, str)}
    peer = context.peer() or ANONYMOUS
    timeouts = [_client_timeout(metadata.get(TIMEOUT_HEADER))]
    with contextlib.suppress(NotImplementedError):
        timeouts.append(context.time_remaining())
    timeout_s = min((seconds for seconds in timeouts if seconds is not None), default=None)
    return Arrival(_client_id(metadata.get(CLIENT_HEADER), peer.rpartition(":")[0] or peer), timeout_s)


class Admission:
    def __init__(self, max_in_flight: int, timeout_s: float, http_request: Callable[[], Request] | None = None) -> None:
        """`http_request`: the HTTP request being answered (BentoML's `service.context.request`); LookupError, or
        None, where there is none."""
        self.max_in_flight, self.timeout_s, self.http_request = max_in_flight, timeout_s, http_request
        self.in_flight = 0

    def arrival(self) -> Arrival:
        """The request being answered, from its transport: a gRPC call, else an HTTP request, else nobody named."""
        if (call := current_call()) is not None:
            return grpc_arrival(call)
        try:
            request = self.http_request() if self.http_request else None
        except LookupError:
            request = None
        return http_arrival(request) if request is not None else Arrival(ANONYMOUS, None)

    async def run(self, work: Awaitable[T]) -> T:
        """`work`'s result, run as the current request's caller; `Overloaded` when the worker is full,
        `DeadlineExceeded` when it takes too long, `ClientGone` when its client leaves first."""
        try:
            arrival = self.arrival()
        except InvalidRequest:
            _never_started(work)
            raise
        if self.in_flight >= self.max_in_flight:
            _never_started(work)
            raise Overloaded.after(
                1, "request", f"this worker has {self.in_flight} requests in flight, its limit (BIONEMO_MAX_IN_FLIGHT)"
            )
        timeout_s = min(self.timeout_s, arrival.timeout_s or math.inf)
        caller = Caller.from_now(arrival.client, timeout_s)
        self.in_flight += 1
        IN_FLIGHT.inc()
        token = CALLER.set(caller)
        task = asyncio.current_task()
        left: list[bool] = []
        watcher = asyncio.ensure_future(_cancel_when_gone(arrival, task, left)) if arrival.gone and task else None
        try:
            async with asyncio.timeout(timeout_s):  # in this task: no second task per request, as wait_for makes
                return await work
        except TimeoutError:
            raise DeadlineExceeded.at(
                "request", f"not answered within {timeout_s:g} s ({_whose(arrival, self.timeout_s)}); its work was cancelled"
            ) from None
        except asyncio.CancelledError:
            if not left or task is None:
                raise
            task.uncancel()
            raise ClientGone.at("request", "the client went away before the answer; its work was stopped") from None
        finally:
            if watcher is not None:
                watcher.cancel()
            CALLER.reset(token)
            self.in_flight -= 1
            IN_FLIGHT.dec()


def _never_started(work: Awaitable[object]) -> None:
    if asyncio.iscoroutine(work):
        work.close()


def _whose(arrival: Arrival, server_timeout_s: float) -> str:
    own = arrival.timeout_s is not None and arrival.timeout_s < server_timeout_s
    return "the client's X-Request-Timeout or gRPC deadline" if own else "BIONEMO_REQUEST_TIMEOUT_S"


async def _cancel_when_gone(arrival: Arrival, task: asyncio.Task, left: list[bool]) -> None:
    """Cancel `task` once the client has gone, saying so in `left`."""
    assert arrival.gone is not None
    await arrival.gone()
    left.append(True)
    task.cancel()
