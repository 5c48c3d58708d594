"""Admission by estimated cost and a fair queue, in each API worker.

Every engine call states its work (cost.py) once its input is validated. Before anything is sent to Triton the
scheduler estimates when it would finish: the work of the calls running, what is left of it, plus the work queued
ahead of it, plus its own, in this worker's seconds (a running call's share of the worker's time is what it is
charged, so these add up to the time the worker is busy). One that would finish past its caller's deadline is
refused at once: `OverShare` (429) where its client holds more than its share of the work while others have some,
else `Overloaded` (503), each with the seconds after which the queue ahead will have drained enough for it
(`Retry-After`). So past capacity the cores go to answers someone will read, not to requests that would time out.

Admitted calls wait for one of `max_running` places, in start-time fair queueing order (Goyal et al., 1996): each
call's start tag is the later of the virtual time (the tag of the call last started) and its client's previous
finish tag, its finish tag the start tag plus its cost. A client that floods queues behind its own work; another
client's lone request starts next, and its graph calls go before others in Triton's queue too (CallPriority); a
waiting call whose deadline nears starts before any start tag, so that clients new to the queue cannot keep it. A
caller whose client has gone is never started (the front cancels its task); one whose deadline the estimates, grown
since, say it can no longer meet is refused when its turn comes rather than started.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import math
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass

from model_catalog import CallPriority
from serving.engine.caller import ANONYMOUS, CALLER, Caller
from serving.engine.cost import CostModel, Work
from serving.errors import Overloaded, OverShare
from serving.metrics import QUEUED

ADMIT_MARGIN = 0.7
"""Share of the time left to a caller that its estimated finish may take: estimates err, and a call admitted must be
answered, not end in a 504."""
URGENT_SLACK = 2.0
"""A waiting call with less than this many times its cost left before its deadline starts before any start tag."""
TURN_MARGIN = 0.9
"""Share of the time left to a waiting call, when its turn comes, that its cost by the estimates then may take."""
LEFT_FLOOR = 0.1
"""Least share of its cost a running call is counted as having left, however long it has run already."""

PRIORITY: ContextVar[CallPriority] = ContextVar("bionemo_call_priority", default=CallPriority.SHARED)
"""The Triton priority of the running call's graph calls (serving/engine/graphs.py): LONE where its client had
nothing else running or waiting in this worker when it started."""


@dataclass(eq=False)
class _Ticket:
    work: Work
    caller: Caller
    cost_s: float
    start_tag: float
    finish_tag: float
    order: int
    turn: asyncio.Future[None] | None = None
    charged_at: float | None = None
    """The scheduler's share clock when the call started; None while it waits."""
    expiry: asyncio.TimerHandle | None = None
    """While it waits: when it is given up, its time left too short for its work (`_expire`)."""


class Scheduler:
    """One per API worker: the calls running, those waiting, and the cost model their answers keep current."""

    def __init__(self, max_running: int, default_timeout_s: float) -> None:
        """`max_running`: calls sent to Triton at once from this worker (BIONEMO_MAX_RUNNING); `default_timeout_s`:
        the deadline of a call no front set one for (BIONEMO_REQUEST_TIMEOUT_S)."""
        self.max_running, self.default_timeout_s = max_running, default_timeout_s
        self.costs = CostModel()
        self.running: list[_Ticket] = []
        self.waiting: list[_Ticket] = []
        self._virtual_time = 0.0
        self._finish_tags: dict[str, float] = {}
        self._last_costs: dict[str, float] = {}
        """Each client's last call's cost, as long as its finish tag is kept."""
        self._share_clock = 0.0
        """Seconds each running call has been charged since the worker started: advances by dt / running."""
        self._share_clock_at: float | None = None
        self._arrivals = itertools.count()

    @contextlib.asynccontextmanager
    async def admitted(self, work: Work) -> AsyncIterator[None]:
        """Run the body as `work`, once admitted and started; `Overloaded` or `OverShare` at once where it cannot
        finish before its caller's deadline."""
        caller = CALLER.get() or Caller.from_now(ANONYMOUS, self.default_timeout_s)
        ticket = self._admit(work, caller)
        answered = False
        try:
            if ticket.turn is not None:
                await ticket.turn
            lone = not any(other.caller.client == caller.client for other in [*self.running, *self.waiting] if other is not ticket)
            PRIORITY.set(CallPriority.LONE if lone else CallPriority.SHARED)
            yield
            answered = True
        finally:
            self._finish(ticket, learn=answered)

    def _now(self) -> float:
        loop_time = asyncio.get_running_loop().time()
        if self._share_clock_at is not None and self.running:
            self._share_clock += (loop_time - self._share_clock_at) / len(self.running)
        self._share_clock_at = loop_time
        return loop_time

    def _left_s(self, ticket: _Ticket) -> float:
        charged = self._share_clock - (ticket.charged_at or 0.0)
        return max(ticket.cost_s - charged, ticket.cost_s * LEFT_FLOOR)

    def _admit(self, work: Work, caller: Caller) -> _Ticket:
        self._now()
        cost_s = self.costs.seconds(work)
        start_tag = max(self._virtual_time, self._finish_tags.get(caller.client, 0.0))
        ahead_s = sum(self._left_s(ticket) for ticket in self.running)
        ahead_s += sum(ticket.cost_s for ticket in self.waiting if ticket.start_tag <= start_tag)
        # Another client behind this one in service may yet send a call that starts first: up to the difference of
        # tags, and about the size of its last.
        ahead_s += sum(
            min(max(0.0, start_tag - max(self._virtual_time, finish_tag)), self._last_costs[client])
            for client, finish_tag in self._finish_tags.items()
            if client != caller.client
        )
        finish_s = ahead_s + cost_s
        if finish_s > caller.remaining_s() * ADMIT_MARGIN:
            self._refuse(caller, cost_s, finish_s)
        ticket = _Ticket(work, caller, cost_s, start_tag, start_tag + cost_s, next(self._arrivals))
        self._finish_tags[caller.client], self._last_costs[caller.client] = ticket.finish_tag, cost_s
        if (len(self.running) < self.max_running and not self.waiting) or self._starts_beside(caller.client):
            self._start(ticket)
        else:
            loop = asyncio.get_running_loop()
            ticket.turn = loop.create_future()
            needs_s = cost_s * self.max_running / TURN_MARGIN
            ticket.expiry = loop.call_at(caller.deadline - needs_s, self._expire, ticket)
            self.waiting.append(ticket)
            QUEUED.inc()
        return ticket

    def _expire(self, ticket: _Ticket) -> None:
        """Give up a call still waiting when no more than its work's time is left: a 503 now, not a 504 later."""
        if ticket in self.waiting:
            self.waiting.remove(ticket)
            QUEUED.dec()
            self._give_up(ticket, self.costs.seconds(ticket.work) * self.max_running)

    def _refuse(self, caller: Caller, cost_s: float, finish_s: float) -> None:
        """Raise the refusal of a call of `cost_s` that would finish `finish_s` from now: once the queue has drained
        that much less than its time allows, the same call fits."""
        if cost_s > caller.timeout_s * ADMIT_MARGIN:
            raise Overloaded.after(
                cost_s,
                "request",
                f"needs about {cost_s:.1f} s of this service's time by itself, more than the "
                f"{caller.timeout_s:g} s it may take: send less in one request (or allow it more time)",
            )
        retry_after_s = finish_s - caller.timeout_s * ADMIT_MARGIN
        wait = f"retry after {max(1, math.ceil(retry_after_s))} s"
        tickets = [*self.running, *self.waiting]
        clients = {ticket.caller.client for ticket in tickets} | {caller.client}
        own_s = sum(ticket.cost_s for ticket in tickets if ticket.caller.client == caller.client)
        if len(clients) > 1 and own_s > sum(ticket.cost_s for ticket in tickets) / len(clients):
            raise OverShare.after(
                retry_after_s,
                "request",
                f"your requests hold {own_s:.1f} s of this service's work, over your share while others wait; {wait}",
            )
        raise Overloaded.after(
            retry_after_s,
            "request",
            f"the work queued ahead would keep it {finish_s:.1f} s, past its deadline ({caller.remaining_s():.1f} s "
            f"left of {caller.timeout_s:g} s); {wait}",
        )

    def _starts_beside(self, client: str) -> bool:
        """Whether a call of `client`, which has nothing else here, starts at once beside the running ones: where
        another client, with more of its calls waiting, holds more than its share of the places (up to twice their
        number), so that a flood does not make a lone request wait for one of its calls to end."""
        tickets = [*self.running, *self.waiting]
        if len(self.running) >= 2 * self.max_running or any(ticket.caller.client == client for ticket in tickets):
            return False
        share = self.max_running / len({ticket.caller.client for ticket in tickets} | {client})
        held = collections.Counter(ticket.caller.client for ticket in self.running)
        flooding = {ticket.caller.client for ticket in self.waiting}
        return any(places > share for holder, places in held.items() if holder in flooding)

    def _start(self, ticket: _Ticket) -> None:
        self._now()
        if ticket.expiry is not None:
            ticket.expiry.cancel()
        ticket.charged_at = self._share_clock
        self._virtual_time = max(self._virtual_time, ticket.start_tag)
        self.running.append(ticket)

    def _finish(self, ticket: _Ticket, learn: bool) -> None:
        self._now()
        if ticket in self.running:
            self.running.remove(ticket)
            if learn and ticket.charged_at is not None:
                self.costs.learn(ticket.work, self._share_clock - ticket.charged_at)
        elif ticket in self.waiting:  # cancelled while it waited: its client has gone, or its deadline passed
            self.waiting.remove(ticket)
            QUEUED.dec()
        if not self.running and not self.waiting:
            self._finish_tags.clear()  # idle: every client starts afresh at the virtual time
            self._last_costs.clear()
        self._start_waiting()

    def _next(self) -> _Ticket:
        """The waiting call to start: the one nearest its deadline among those whose time left is down to
        URGENT_SLACK times what they need (so that calls of clients new to the queue, whose start tags come first,
        cannot keep an admitted call waiting past its deadline), else the earliest start tag."""
        sharing = min(len(self.running) + 1, self.max_running)
        urgent = [
            ticket
            for ticket in self.waiting
            if ticket.caller.remaining_s() < URGENT_SLACK * self.costs.seconds(ticket.work) * sharing
        ]
        if urgent:
            return min(urgent, key=lambda ticket: ticket.caller.deadline)
        return min(self.waiting, key=lambda waiting: (waiting.start_tag, waiting.order))

    def _start_waiting(self) -> None:
        """Start waiting calls while places are free (`_next`); give up instead any whose time left is now shorter
        than its cost."""
        while self.waiting and len(self.running) < self.max_running:
            ticket = self._next()
            self.waiting.remove(ticket)
            QUEUED.dec()
            assert ticket.turn is not None
            # once started it shares the worker with those running, and lasts its cost that many times: admission,
            # which counts the work ahead drained at the worker's pace, does not multiply (concurrent decodes share
            # their steps); a call started short of that time would end in a 504
            cost_s = self.costs.seconds(ticket.work) * min(len(self.running) + 1, self.max_running)
            left_s = ticket.caller.remaining_s()
            if cost_s > left_s * TURN_MARGIN:
                self._give_up(ticket, cost_s)
                continue
            self._start(ticket)
            ticket.turn.set_result(None)

    @staticmethod
    def _give_up(ticket: _Ticket, cost_s: float) -> None:
        """Answer a waiting call that can no longer finish in time with a 503 instead of starting it."""
        assert ticket.turn is not None
        if ticket.expiry is not None:
            ticket.expiry.cancel()
        left_s = ticket.caller.remaining_s()
        ticket.turn.set_exception(
            Overloaded.after(
                cost_s, "request", f"waited its turn until {left_s:.1f} s were left of its deadline, too few for its "
                f"{cost_s:.1f} s of work here now; retry after {max(1, math.ceil(cost_s))} s",
            )  # fmt: skip
        )
