"""Admission by estimated cost and a planned, fair queue, in each API worker.

Every engine call states its work (cost.py) once its input is validated. Before anything is sent to Triton the
scheduler plans when it would finish: the work of the calls running (what is left of it), then the waiting calls
in the order they will start, each one's cost, in this worker's seconds (a running call's share of the worker's time
is what it is charged, so these add up to the time the worker is busy). A new call takes its place in that plan and
is admitted only if it finishes before its caller's deadline (ADMIT_MARGIN of it), with room to spare for one more
call of its size where it waits (CUT_IN_RESERVE). Else it is refused at once: `OverShare` (429) where its client
holds more than its share of the work while others have some, else `Overloaded` (503), each with the seconds after
which the plan will have drained enough for it and the calls refused before it have had their turn (`Retry-After`).
So past capacity the cores go to answers someone will read, not to requests that would time out, nor to refusing the
same clients again.

Its place is fair: start-time fair queueing (Goyal et al., 1996) gives each call a start tag, the later of the virtual
time (the tag of the call last started) and its client's previous finish tag, and a finish tag, the start tag plus
its cost. A flooding client queues behind its own work; another client's call goes before every waiting call with a
later start tag, but only where each of them still finishes in its own time with the new call ahead of it (their
spare room is what it may take); else it goes further back. A call admitted is so never pushed past its deadline by
a later one: the plan holds unless the estimates were wrong. Where the plan has no room left at a client's fair
place, and another client holds more work than it would, that client's earliest calls waiting behind the place give
it up, refused 429 (longest queue drop): a flood cannot hold a newcomer out, and equals never trade places. A lone
client's call starts at once beside the running ones where a flooder holds more than its share of them, and its graph
calls go first in Triton's queue (CallPriority). A caller whose client has gone is never started (the front cancels its task); one whose time left
the estimates, grown since, say is too short is given up before its deadline rather than started.

The API workers of one `bentoml serve` share one tritonserver and the cores. Each publishes its planned work on a
board they share (ProcessBoard) and plans with the others' in view: a running call is charged its share of the
machine (the time it ran, over the calls running here and the workers busy), so its cost means the same whether the
other workers were busy or idle while it was learnt; and a planned finish is stretched by the other workers' planned
work as processor sharing would (own work f finishes after f plus, of each other worker's planned W, min(f, W)).
Alone, a worker's estimates swung twofold with the other's load: a queue admitted while the other was idle took twice
its plan once it was busy, and its tail was given up at its turn.

Plans still err: a sibling admits work after this one planned, the event loop answers refusals between Triton calls.
So each waiting call answered whose plan reached near its limit teaches how late that plan was (its time from
admission over its planned finish), and admission holds the plans of calls that would wait behind others to the
deadline stretched by a high quantile of the recent lateness (Lateness): a call the plan would finish too late is
refused at once, not given up after waiting most of its deadline.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import math
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from dataclasses import dataclass

from bionemo_serving.model_catalog import CallPriority
from bionemo_serving.engine.caller import ANONYMOUS, CALLER, Caller
from bionemo_serving.engine.cost import CostModel, Work
from bionemo_serving.errors import Overloaded, OverShare
from bionemo_serving.metrics import QUEUED
from bionemo_serving.runtimes.engines import ProcessBoard

ADMIT_MARGIN = 0.7
"""Share of the time left to a caller that its planned finish may take: estimates err, and a call admitted must be
answered, not end in a 504."""
CUT_IN_RESERVE = 1.0
"""Room a call admitted leaves before its finish limit, in its own costs: what calls of fairer clients placed ahead of
it later may take."""
SHARED_RUN_S = 0.25
"""Most estimated work a call may start beside (what the calls running have left, plus its own): longer calls run one
at a time, as Triton's batcher would merge concurrent ones into batches that take as long as all of them together,
while short ones still start together and share Triton's batches."""
TURN_MARGIN = 0.9
"""Share of the time left to a waiting call, when its turn comes, that its cost by the estimates then may take."""
LEFT_FLOOR = 0.1
"""Least share of its cost a running call is counted as having left, however long it has run already."""
LATENESS_SAMPLES = 64
"""Waiting calls answered whose lateness counts: the last few seconds' worth under load."""
LATENESS_QUANTILE = 0.95
"""Of the recent lateness, what admission allows for: nearly every admitted call then finishes in time."""
LATENESS_PLAN_SHARE = 0.5
"""Least share of what admission allowed it (its limit over the allowance) a call's plan took for its lateness to
count: the plans near the limit are the ones whose lateness ends in give-ups; a short plan's is noise (a call planned
to start at once, then waiting for a sibling's), and would close admission at a load the service carries. Relative
to the allowance, so that a high one is still corrected by the plans it admits."""
LATENESS_RANGE = (1.0, 3.0)
"""Bounds of the allowance: plans are never counted as early, and a few odd answers do not close admission."""
PLAN_BOARD = "bionemo-api-plan-"
"""The name of the API workers' board, before their parent's pid and start time."""


def plan_board() -> ProcessBoard:
    """This API worker's slot on the board of its siblings (the workers of one `bentoml serve`)."""
    return ProcessBoard(PLAN_BOARD)

PRIORITY: ContextVar[CallPriority] = ContextVar("bionemo_call_priority", default=CallPriority.SHARED)
"""The Triton priority of the running call's graph calls (bionemo_serving/engine/graphs.py): LONE where its client had
nothing else running or waiting in this worker when it started."""


@dataclass(eq=False)
class _Ticket:
    work: Work
    caller: Caller
    cost_s: float
    start_tag: float
    turn: asyncio.Future[None] | None = None
    charged_at: float | None = None
    """The scheduler's share clock when the call started; None while it waits."""
    expiry: asyncio.TimerHandle | None = None
    """While it waits: when it is given up, its time left too short for its work (`_expire`)."""
    admitted_at: float = 0.0
    planned_s: float = 0.0
    """Its finish from admission, as planned then (without the lateness allowance), where its lateness counts."""

    @property
    def limit_s(self) -> float:
        """How long from now the call may take to finish, by ADMIT_MARGIN of its time left."""
        return self.caller.remaining_s() * ADMIT_MARGIN


class Lateness:
    """How late the plans of waiting calls turn out: each answered one's time from admission over its planned finish,
    the last LATENESS_SAMPLES of them; admission allows for their LATENESS_QUANTILE (kept as they come: admission
    reads it for every waiting call it places a new one among)."""

    def __init__(self) -> None:
        self.samples: collections.deque[float] = collections.deque(maxlen=LATENESS_SAMPLES)
        self.allowance = LATENESS_RANGE[0]
        """The factor admission stretches plans by."""

    def learn(self, took_s: float, planned_s: float) -> None:
        if planned_s <= 0:
            return
        self.samples.append(took_s / planned_s)
        ordered = sorted(self.samples)
        quantile = ordered[min(len(ordered) - 1, int(LATENESS_QUANTILE * len(ordered)))]
        self.allowance = min(max(quantile, LATENESS_RANGE[0]), LATENESS_RANGE[1])


@dataclass(frozen=True)
class _Place:
    index: int
    """Where in the waiting calls it goes."""
    own_s: float
    """This worker's planned work up to its finish, itself included (its finish: Scheduler._stretched)."""
    fair: int
    """Its fair place: before the first waiting call with a later start tag."""


class Scheduler:
    """One per API worker: the calls running, those waiting in the order they will start, and the cost model their
    answers keep current."""

    def __init__(
        self,
        max_running: int,
        default_timeout_s: float,
        shared_run_s: float = SHARED_RUN_S,
        board: Callable[[], ProcessBoard] | None = None,
    ) -> None:
        """`max_running`: calls sent to Triton at once from this worker (BIONEMO_MAX_RUNNING); `default_timeout_s`:
        the deadline of a call no front set one for (BIONEMO_REQUEST_TIMEOUT_S); `shared_run_s`: SHARED_RUN_S;
        `board`: opens the board shared with the other API workers, once the first call comes (in the worker, not
        in the process that imports the service to start them); None: this worker plans alone."""
        self.max_running, self.default_timeout_s, self.shared_run_s = max_running, default_timeout_s, shared_run_s
        self._open_board = board
        self._board: ProcessBoard | None = None
        self._others: list[float] = []
        """The other workers' planned work (seconds), as the board said at the last event."""
        self.costs = CostModel()
        self.lateness = Lateness()
        self.running: list[_Ticket] = []
        self.waiting: list[_Ticket] = []
        """In the order they will start: the plan."""
        self._virtual_time = 0.0
        self._finish_tags: dict[str, float] = {}
        self._share_clock = 0.0
        """Seconds each running call has been charged since the worker started: advances by dt / running."""
        self._share_clock_at: float | None = None
        self._next_appointment = 0.0
        """When the next call refused may come back (loop time): refusals are given times spaced by their work, so
        that many clients refused at once come back at the pace the worker drains, not all after the same wait."""

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
        """The loop's time, the share clock advanced to it, and the other workers' plans read."""
        loop_time = asyncio.get_running_loop().time()
        if self._share_clock_at is not None and self.running:
            busy_workers = 1 + len(self._others)
            self._share_clock += (loop_time - self._share_clock_at) / (len(self.running) * busy_workers)
        self._share_clock_at = loop_time
        if self._open_board is not None and self._board is None:
            self._board = self._open_board()
        if self._board is not None:
            self._others = self._board.others()
        return loop_time

    def _publish(self) -> None:
        """Put this worker's planned work on the board, after each change of its plan."""
        if self._board is not None:
            self._board.publish(self._running_s() + sum(ticket.cost_s for ticket in self.waiting))

    def _stretched(self, own_s: float) -> float:
        """When this worker's planned work of `own_s` is done, the other workers' planned work sharing the machine
        with it: each of theirs takes as much of the time as this one's, until it ends (processor sharing)."""
        return own_s + sum(min(own_s, other_s) for other_s in self._others)

    def _admitted_finish(self, own_s: float, index: int) -> float:
        """The finish admission holds to a deadline, of a call placed at `index` of the waiting calls: the planned
        one, with the allowance for plans' lateness where it waits behind others (at the head, it waits only for the
        calls running: a short plan, and a lone client's call is not held out by a flooder's lateness)."""
        return self._stretched(own_s) * (self.lateness.allowance if index else 1.0)

    def _own_within(self, limit_s: float) -> float:
        """The most planned work of this worker that admission holds to finish within `limit_s`, behind waiting
        calls: the inverse of `_admitted_finish`."""
        limit_s /= self.lateness.allowance
        others = sorted(self._others)
        done_s = 0.0  # the others' work ended before the segment considered
        for index, other_s in enumerate(others):
            sharing = 1 + len(others) - index
            if other_s * sharing + done_s >= limit_s:
                return (limit_s - done_s) / sharing
            done_s += other_s
        return max(0.0, limit_s - done_s)

    def _left_s(self, ticket: _Ticket) -> float:
        charged = self._share_clock - (ticket.charged_at or 0.0)
        return max(ticket.cost_s - charged, ticket.cost_s * LEFT_FLOOR)

    def _place(self, cost_s: float, start_tag: float, waiting: list[_Ticket] | None = None) -> _Place:
        """The earliest place at or after its fair one (before the first waiting call with a later start tag) where
        every call behind it still finishes within its limit; its planned finish there. `waiting`: the plan to place
        it in (default: this one)."""
        waiting = self.waiting if waiting is None else waiting
        finishes = list(itertools.accumulate((ticket.cost_s for ticket in waiting), initial=self._running_s()))
        spare = [
            self._own_within(ticket.limit_s) - finish for ticket, finish in zip(waiting, finishes[1:], strict=True)
        ]
        least_spare_behind = list(itertools.accumulate(reversed(spare), min, initial=math.inf))[::-1]
        fair = self._fair_index(start_tag, waiting)
        index = next(index for index in range(fair, len(waiting) + 1) if least_spare_behind[index] >= cost_s)
        return _Place(index, finishes[index] + cost_s, fair)

    @staticmethod
    def _fair_index(start_tag: float, waiting: list[_Ticket]) -> int:
        """Before the first waiting call with a later start tag."""
        return next((index for index, ticket in enumerate(waiting) if ticket.start_tag > start_tag), len(waiting))

    def _room_made(self, ticket: _Ticket) -> list[_Ticket]:
        """The waiting calls to refuse so that `ticket` takes its fair place and finishes in its time: the earliest
        ones behind that place of the client holding the most work, so long as that client still holds at least as
        much as `ticket`'s client then does (longest queue drop, Suter et al., 1998: a flooder's calls give way to a
        client below its share, never one client's to another's equal). None where no such choice makes room."""
        held = collections.Counter()
        for other in [*self.running, *self.waiting]:
            held[other.caller.client] += other.cost_s
        newcomer_s = held[ticket.caller.client] + ticket.cost_s
        victims = [client for client, _ in held.most_common(1) if client != ticket.caller.client]
        if not victims:
            return []
        fair = self._fair_index(ticket.start_tag, self.waiting)
        behind = [other for other in self.waiting[fair:] if other.caller.client == victims[0]]
        dropped: list[_Ticket] = []
        for victim in behind:
            if held[victims[0]] - victim.cost_s < newcomer_s:
                break
            held[victims[0]] -= victim.cost_s
            dropped.append(victim)
            waiting = [other for other in self.waiting if other not in dropped]
            place = self._place(ticket.cost_s, ticket.start_tag, waiting)
            reserved_s = place.own_s + ticket.cost_s * CUT_IN_RESERVE
            if place.index == place.fair and self._admitted_finish(reserved_s, place.index) <= ticket.limit_s:
                return dropped
        return []

    def _running_s(self) -> float:
        return sum(self._left_s(ticket) for ticket in self.running)

    def _admit(self, work: Work, caller: Caller) -> _Ticket:
        now = self._now()
        cost_s = self.costs.seconds(work)
        start_tag = max(self._virtual_time, self._finish_tags.get(caller.client, 0.0))
        ticket = _Ticket(work, caller, cost_s, start_tag)
        place = self._place(cost_s, start_tag)
        reserved_s = place.own_s + cost_s * CUT_IN_RESERVE
        if place.index > place.fair or self._admitted_finish(reserved_s, place.index) > ticket.limit_s:
            for dropped in self._room_made(ticket):
                self._drop(dropped)
            place = self._place(cost_s, start_tag)
        starts = (self._has_place(ticket) and not self.waiting) or self._starts_beside(ticket, place)
        needed_s = self._admitted_finish(place.own_s + (0.0 if starts else cost_s * CUT_IN_RESERVE), place.index)
        if needed_s > caller.remaining_s() * ADMIT_MARGIN:
            self._refuse(caller, cost_s, needed_s, now)
        self._finish_tags[caller.client] = start_tag + cost_s
        if starts:
            self._start(ticket)
        else:
            loop = asyncio.get_running_loop()
            planned_s = self._stretched(place.own_s)
            if planned_s >= ticket.limit_s / self.lateness.allowance * LATENESS_PLAN_SHARE:
                ticket.admitted_at, ticket.planned_s = now, planned_s
            ticket.turn = loop.create_future()
            needs_s = self._stretched(cost_s * self._sharing(cost_s)) / TURN_MARGIN
            ticket.expiry = loop.call_at(caller.deadline - needs_s, self._expire, ticket)
            self.waiting.insert(place.index, ticket)
            QUEUED.inc()
        self._publish()
        return ticket

    def _expire(self, ticket: _Ticket) -> None:
        """Give up a call still waiting when no more than its work's time is left: a 503 now, not a 504 later."""
        if ticket in self.waiting:
            self.waiting.remove(ticket)
            QUEUED.dec()
            cost_s = self.costs.seconds(ticket.work)
            self._give_up(ticket, self._stretched(cost_s * self._sharing(cost_s)))
            self._publish()

    def _drop(self, ticket: _Ticket) -> None:
        """Refuse a waiting call of a client over its share (429), its place given to a fairer client's call."""
        self.waiting.remove(ticket)
        QUEUED.dec()
        self._publish()
        assert ticket.turn is not None
        if ticket.expiry is not None:
            ticket.expiry.cancel()
        retry_after_s = self._stretched(max(ticket.cost_s, self._running_s()))
        ticket.turn.set_exception(
            OverShare.after(
                retry_after_s, "request", f"your requests hold more of this service's work than other clients; a "
                f"client below its share took this one's place; retry after {max(1, math.ceil(retry_after_s))} s",
            )  # fmt: skip
        )

    def _refuse(self, caller: Caller, cost_s: float, needed_s: float, now: float) -> None:
        """Raise the refusal of a call of `cost_s` that needs `needed_s` from now: once the plan has drained that
        much less than its time allows, the same call fits, and not before the calls refused earlier are back."""
        if cost_s > caller.timeout_s * ADMIT_MARGIN:
            raise Overloaded.after(
                cost_s,
                "request",
                f"needs about {cost_s:.1f} s of this service's time by itself, more than the "
                f"{caller.timeout_s:g} s it may take: send less in one request (or allow it more time)",
            )
        retry_after_s = max(needed_s - caller.timeout_s * ADMIT_MARGIN, self._next_appointment - now)
        self._next_appointment = now + retry_after_s + cost_s
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
            f"the work planned ahead would keep it {needed_s:.1f} s (room for one more call of its size included), "
            f"past its deadline ({caller.remaining_s():.1f} s left of {caller.timeout_s:g} s); {wait}",
        )

    def _starts_beside(self, ticket: _Ticket, place: _Place) -> bool:
        """Whether a call whose client has nothing else here, placed first, starts at once beside the running ones:
        where another client, with calls waiting, holds more than its share of the calls running (up to twice
        `max_running` of them run), and every waiting call has room for it ahead; so that a flood does not make a
        lone request wait for one of its calls to end (its graph calls go first in Triton's queue: CallPriority)."""
        client = ticket.caller.client
        tickets = [*self.running, *self.waiting]
        if place.index or len(self.running) >= 2 * self.max_running:
            return False
        if any(other.caller.client == client for other in tickets):
            return False
        share = len(self.running) / len({other.caller.client for other in tickets} | {client})
        held = collections.Counter(other.caller.client for other in self.running)
        flooding = {other.caller.client for other in self.waiting}
        return any(places > share for holder, places in held.items() if holder in flooding)

    def _has_place(self, ticket: _Ticket) -> bool:
        """Whether `ticket` may start now: its work shares its steps with the calls running, or nothing else runs, or
        one of `max_running` places is free and the work running with its own is short (`shared_run_s`)."""
        if ticket.work.shares_steps:
            return True
        counted = [other for other in self.running if not other.work.shares_steps]
        running_s = sum(self._left_s(other) for other in counted) + ticket.cost_s
        return not counted or (len(counted) < self.max_running and running_s <= self.shared_run_s)

    def _sharing(self, cost_s: float) -> int:
        """How many calls one of `cost_s` may run beside at most, itself included: a long one runs alone."""
        return 1 if cost_s > self.shared_run_s else self.max_running

    def _start(self, ticket: _Ticket) -> None:
        self._now()
        if ticket.expiry is not None:
            ticket.expiry.cancel()
        ticket.charged_at = self._share_clock
        self._virtual_time = max(self._virtual_time, ticket.start_tag)
        self.running.append(ticket)

    def _finish(self, ticket: _Ticket, learn: bool) -> None:
        now = self._now()
        if ticket in self.running:
            self.running.remove(ticket)
            if learn and ticket.charged_at is not None:
                self.costs.learn(ticket.work, self._share_clock - ticket.charged_at)
            if learn and ticket.planned_s:
                self.lateness.learn(now - ticket.admitted_at, ticket.planned_s)
        elif ticket in self.waiting:  # cancelled while it waited: its client has gone, or its deadline passed
            self.waiting.remove(ticket)
            QUEUED.dec()
        if not self.running and not self.waiting:
            self._finish_tags.clear()  # idle: every client starts afresh at the virtual time
            self._next_appointment = 0.0
        self._start_waiting()
        self._publish()

    def _start_waiting(self) -> None:
        """Start the waiting calls in their planned order while places are free; give up instead any whose time
        left is now shorter than its cost."""
        while self.waiting and self._has_place(self.waiting[0]):
            ticket = self.waiting.pop(0)
            QUEUED.dec()
            assert ticket.turn is not None
            if ticket.turn.done():  # cancelled (its client gone), its task not yet back to take it out
                continue
            # once started it shares the worker with those running, and lasts its cost that many times; a call
            # started short of that time would end in a 504
            cost_s = self.costs.seconds(ticket.work)
            cost_s = self._stretched(cost_s * min(len(self.running) + 1, self._sharing(cost_s)))
            if cost_s > ticket.caller.remaining_s() * TURN_MARGIN:
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
