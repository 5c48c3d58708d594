"""Admission by estimated cost (bionemo_serving/engine/scheduler.py) and the fronts' part of it (bionemo_serving/fronts/admission.py):
refusals at once with the wait computed from the queue, fair turns between clients, the client's own deadline, work
whose client has gone never started, and the estimates corrected by the answers."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from starlette.requests import Request

from bionemo_serving.model_catalog import CallPriority
from bionemo_serving.engine.caller import CALLER, Caller
from bionemo_serving.engine.cost import LEARNING_RATE, SAMPLE_SPAN, CostModel, Work
from bionemo_serving.engine.scheduler import ADMIT_MARGIN, CUT_IN_RESERVE, Lateness, Scheduler
from bionemo_serving.errors import ClientGone, DeadlineExceeded, InvalidRequest, Overloaded, OverShare
from bionemo_serving.fronts.admission import Admission, http_arrival
from bionemo_serving.runtimes.engines import ProcessBoard
from support.in_process import Body, InProcessService, http_request

EMBED = "esm2nv/embed"


class Held:
    """Engine calls held running (or waiting their turn) until released, each as a caller of its own."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.tasks: list[asyncio.Task] = []

    def send(self, name: str, client: str, seconds: float, timeout_s: float = 10.0) -> asyncio.Task:
        async def call() -> str:
            CALLER.set(Caller.from_now(client, timeout_s))
            async with self.scheduler.admitted(Work(EMBED, seconds)):
                self.started.append(name)
                await self.release.wait()
            return name

        task = asyncio.ensure_future(call())
        self.tasks.append(task)
        return task

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_a_call_the_work_ahead_would_keep_past_its_deadline_is_refused_at_once_with_the_wait() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=10)
        held = Held(scheduler)
        held.send("running", "a", 1.0)
        held.send("queued", "b", 2.0)
        await held.settle()
        assert held.started == ["running"] and len(scheduler.waiting) == 1
        # 10 s of deadline, ADMIT_MARGIN of it to finish in with room for one more call of its size: 1 + 2 + 3 (+ 3)
        # s is past it
        CALLER.set(Caller.from_now("c", 10.0))
        with pytest.raises(Overloaded) as refused:
            async with scheduler.admitted(Work(EMBED, 3.0)):
                raise AssertionError("a refused call ran")
        expected_wait = 1.0 + 2.0 + 3.0 * (1 + CUT_IN_RESERVE) - 10.0 * ADMIT_MARGIN
        assert refused.value.retry_after_s == pytest.approx(expected_wait, abs=0.05)
        assert refused.value.retry_after_header == str(math.ceil(expected_wait - 0.05))
        assert "past its deadline" in str(refused.value)
        # a call that fits is admitted and waits its turn
        held.send("fits", "c", 0.5)
        await held.settle()
        assert len(scheduler.waiting) == 2
        held.release.set()
        assert sorted(await asyncio.gather(*held.tasks)) == ["fits", "queued", "running"]
        assert not scheduler.running and not scheduler.waiting

    run(test)


def test_calls_refused_one_after_another_are_told_to_come_back_one_after_another() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=10)
        held = Held(scheduler)
        held.send("running", "a", 1.0)
        held.send("queued", "b", 2.0)
        await held.settle()
        waits = []
        for client in ("c", "d"):
            CALLER.set(Caller.from_now(client, 10.0))
            with pytest.raises(Overloaded) as refused:
                async with scheduler.admitted(Work(EMBED, 3.0)):
                    raise AssertionError("a refused call ran")
            waits.append(refused.value.retry_after_s)
        # c fits once the plan has drained 2 s; d after c's turn too, not at the same moment
        assert waits == pytest.approx([2.0, 2.0 + 3.0], abs=0.05)
        held.release.set()
        await asyncio.gather(*held.tasks)

    run(test)


def test_long_calls_run_one_at_a_time_and_short_ones_together() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=4, default_timeout_s=60)
        long_calls, short_calls = Held(scheduler), Held(scheduler)
        for index in range(3):
            long_calls.send(f"long-{index}", f"l{index}", 1.0, timeout_s=60)
        await long_calls.settle()
        assert long_calls.started == ["long-0"] and len(scheduler.waiting) == 2
        long_calls.release.set()
        await asyncio.gather(*long_calls.tasks)
        for index in range(3):
            short_calls.send(f"short-{index}", f"s{index}", 0.01, timeout_s=60)
        await short_calls.settle()
        assert short_calls.started == ["short-0", "short-1", "short-2"]  # Triton may batch them together
        short_calls.release.set()
        await asyncio.gather(*short_calls.tasks)

    run(test)


def test_a_call_that_alone_needs_more_than_its_time_is_refused_saying_so() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=4, default_timeout_s=10)
        CALLER.set(Caller.from_now("a", 10.0))
        with pytest.raises(Overloaded, match=r"needs about 9.0 s .* by itself, more than the 10 s it may take"):
            async with scheduler.admitted(Work(EMBED, 9.0)):
                raise AssertionError("a refused call ran")

    run(test)


def test_a_lone_request_of_another_client_starts_before_a_flooding_clients_queue() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=2, default_timeout_s=60, shared_run_s=math.inf)
        held = Held(scheduler)
        for index in range(8):
            held.send(f"flood-{index}", "flooder", 0.5, timeout_s=60)
        await held.settle()
        assert held.started == ["flood-0", "flood-1"]
        held.send("lone", "other", 0.5, timeout_s=60)
        await held.settle()
        # the next place freed goes to the other client, not to the flooder's six waiting calls
        first_done = next(task for task in held.tasks if not task.done())
        first_done.cancel()
        await held.settle()
        assert held.started[2] == "lone"
        held.release.set()
        await asyncio.gather(*held.tasks, return_exceptions=True)

    run(test)


def test_a_flooders_earliest_waiting_call_gives_its_place_to_a_client_below_its_share() -> None:
    """Longest queue drop: a first newcomer starts at once beside the flooder's running call; the flooder's plan has
    room for one more call (CUT_IN_RESERVE), which that takes; a second newcomer's call takes the place of the
    flooder's earliest waiting call, refused 429, and runs next."""

    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=10)
        held = Held(scheduler)
        flood = [held.send(f"flood-{index}", "flooder", 1.0, timeout_s=10) for index in range(6)]
        await held.settle()
        assert len(scheduler.waiting) == 5  # 6 s of work planned of the 7 s it may take: room for one more
        first = held.send("first", "a", 1.0, timeout_s=10)
        await held.settle()
        second = held.send("second", "b", 1.0, timeout_s=10)
        await held.settle()
        with pytest.raises(OverShare, match="took this one's place"):
            await flood[1]
        assert held.started == ["flood-0", "first"]
        assert [ticket.caller.client for ticket in scheduler.waiting][:2] == ["b", "flooder"]
        held.release.set()
        assert await asyncio.gather(first, second) == ["first", "second"]
        await asyncio.gather(flood[0], *flood[2:])
        assert held.started[:3] == ["flood-0", "first", "second"]

    run(test)


def test_equal_clients_do_not_take_each_others_places() -> None:
    """Four clients holding one call each, the plan full: a fifth is refused at once rather than given another's
    place."""

    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=10)
        held = Held(scheduler)
        for index in range(4):
            held.send(f"call-{index}", f"client-{index}", 1.2, timeout_s=10)
        await held.settle()
        CALLER.set(Caller.from_now("newcomer", 10.0))
        with pytest.raises(Overloaded):  # 4 x 1.2 s planned, 1.2 s more and as much room: past 7 s
            async with scheduler.admitted(Work(EMBED, 1.2)):
                raise AssertionError("a refused call ran")
        assert len(scheduler.waiting) == 3
        held.release.set()
        await asyncio.gather(*held.tasks)

    run(test)


def test_a_newcomer_goes_before_waiting_calls_with_later_tags_only_where_they_keep_their_time() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=60)
        held = Held(scheduler)
        held.send("running", "a", 1.0, timeout_s=60)
        held.send("b-first", "b", 1.0, timeout_s=60)
        held.send("b-second", "b", 1.0, timeout_s=6)  # start tag 1; planned to finish at 3 s of its 4.2 s
        await held.settle()
        held.send("c", "c", 1.0, timeout_s=60)  # start tag 0: before b's second, which keeps 0.2 s to spare
        await held.settle()
        held.send("d", "d", 1.5, timeout_s=60)  # start tag 0 too, but b's second has no room for it: behind
        await held.settle()
        assert [ticket.caller.client for ticket in scheduler.waiting] == ["b", "c", "b", "d"]
        held.release.set()
        await asyncio.gather(*held.tasks)
        assert held.started == ["running", "b-first", "c", "b-second", "d"]

    run(test)


def test_a_client_over_its_share_is_told_429_while_another_is_told_503() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=10)
        held = Held(scheduler)
        held.send("lone", "other", 0.5)
        for index in range(6):
            held.send(f"flood-{index}", "flooder", 1.0, timeout_s=60)
        await held.settle()
        CALLER.set(Caller.from_now("flooder", 10.0))
        with pytest.raises(OverShare, match="over your share"):
            async with scheduler.admitted(Work(EMBED, 2.0)):
                pass
        CALLER.set(Caller.from_now("newcomer", 10.0))
        with pytest.raises(Overloaded):  # behind the running call and the flooder's first: 1.5 + 6 (+ 6) s > 7 s
            async with scheduler.admitted(Work(EMBED, 6.0)):
                pass
        held.release.set()
        await asyncio.gather(*held.tasks)

    run(test)


def test_a_waiting_call_cancelled_leaves_the_queue_and_is_never_started() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=10)
        held = Held(scheduler)
        held.send("running", "a", 1.0)
        waiting = held.send("gone", "b", 1.0)
        await held.settle()
        waiting.cancel()
        await held.settle()
        assert not scheduler.waiting
        held.release.set()
        await asyncio.gather(*held.tasks, return_exceptions=True)
        assert held.started == ["running"]

    run(test)


def test_the_estimates_follow_what_the_answers_took() -> None:
    costs = CostModel()
    work = Work(EMBED, 2.0)
    assert costs.seconds(work) == 2.0
    costs.learn(work, took_s=1.0)  # half its nominal time
    assert costs.seconds(work) == pytest.approx(2.0 * (1 + LEARNING_RATE * (0.5 - 1)))
    for _ in range(50):
        costs.learn(work, took_s=1.0)
    assert costs.seconds(work) == pytest.approx(1.0, rel=0.01)
    assert costs.seconds(Work("megamolbart/generate", 2.0)) == 2.0  # each kind its own
    before = costs.seconds(work)
    costs.learn(work, took_s=1e6)  # one absurd answer moves it, a bounded step
    assert costs.seconds(work) == pytest.approx(before * (1 + LEARNING_RATE * (SAMPLE_SPAN - 1)))


def test_answered_calls_teach_the_scheduler_their_share_of_the_worker() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=2, default_timeout_s=10, shared_run_s=math.inf)

        async def call() -> None:
            async with scheduler.admitted(Work(EMBED, 1.0)):
                await asyncio.sleep(0.2)

        await asyncio.gather(call(), call())  # two at once, 0.2 s each: 0.1 s of the worker's time each
        expected = 1.0
        for _ in range(2):  # each answer a bounded step towards 0.1
            expected += LEARNING_RATE * (max(0.1, expected / SAMPLE_SPAN) - expected)
        assert scheduler.costs.factors[EMBED] == pytest.approx(expected, abs=0.02)

    run(test)


def test_admission_allows_for_how_late_the_plans_of_waiting_calls_turned_out() -> None:
    lateness = Lateness()
    assert lateness.allowance == 1.0
    for ratio in [0.5] * 10 + [1.5] * 9 + [2.0, 9.0]:  # one odd answer is past the quantile
        lateness.learn(ratio, 1.0)
    assert lateness.allowance == 2.0

    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=10)
        held = Held(scheduler)
        held.send("running", "a", 1.0)
        await held.settle()
        scheduler.lateness.learn(2.0, 1.0)  # a waiting call answered twice as late as planned
        # at the head, behind the running call alone, a plan is short and sure: 1 + 2.5 (+ 2.5) s of ADMIT_MARGIN
        # of 10 s, admitted as planned
        held.send("head", "h", 2.5)
        await held.settle()
        assert [ticket.caller.client for ticket in scheduler.waiting] == ["h"]
        # behind a waiting call, 1 + 2.5 + 1 (+ 1) s fits on the plan; twice that does not
        CALLER.set(Caller.from_now("c", 10.0))
        with pytest.raises(Overloaded) as refused:
            async with scheduler.admitted(Work(EMBED, 1.0)):
                raise AssertionError("a refused call ran")
        assert refused.value.retry_after_s == pytest.approx(2 * 5.5 - 10.0 * ADMIT_MARGIN, abs=0.05)
        scheduler.lateness = Lateness()  # the allowance back to none
        held.send("near its limit", "d", 0.5, timeout_s=8.0)  # planned 4 s of its 5.6
        await held.settle()
        assert [ticket.caller.client for ticket in scheduler.waiting] == ["h", "d"]
        held.release.set()
        await asyncio.gather(*held.tasks)
        # both plans came near what admission allowed them, and teach their lateness (the running call had none)
        assert len(scheduler.lateness.samples) == 2

    run(test)


def test_a_waiting_call_whose_client_went_as_the_running_one_ended_is_not_started() -> None:
    """Both cancelled at once (two clients gone): the running call's end finds the other's turn already cancelled,
    and neither answer becomes an error of the scheduler's."""

    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=10)
        held = Held(scheduler)
        running, waiting = held.send("running", "a", 1.0), held.send("waiting", "b", 1.0)
        await held.settle()
        running.cancel()
        waiting.cancel()
        outcomes = await asyncio.gather(*held.tasks, return_exceptions=True)
        assert all(isinstance(outcome, asyncio.CancelledError) for outcome in outcomes), outcomes
        assert held.started == ["running"] and not scheduler.running and not scheduler.waiting

    run(test)


def test_a_worker_plans_with_its_siblings_work_as_processor_sharing(tmp_path: Path) -> None:
    """The API workers of one server share its cores: a sibling's planned work stretches this one's plan (own work f
    is done after f plus min(f, W) of each sibling's W), so a call that fits alone is refused beside a busy sibling,
    and the cost a call teaches is its share of the machine, the same whether the sibling was busy or idle."""

    async def test() -> None:
        board = tmp_path / "board"
        here = Scheduler(max_running=1, default_timeout_s=10, board=lambda: ProcessBoard("test-", board))
        sibling = Scheduler(max_running=1, default_timeout_s=60, board=lambda: ProcessBoard("test-", board))
        CALLER.set(Caller.from_now("a", 10.0))
        async with here.admitted(Work(EMBED, 1.0)):
            pass  # opens this worker's slot; nothing planned on the sibling yet
        here.costs.factors.clear()  # as the nominal costs say
        assert here._stretched(2.0) == 2.0 and here._own_within(5.0) == 5.0
        siblings = Held(sibling)
        siblings.send("running", "s", 3.0, timeout_s=60)
        siblings.send("queued", "s", 3.0, timeout_s=60)
        await siblings.settle()
        # alone, 4 s fits 10 s x ADMIT_MARGIN; beside the sibling's 6 s it takes 4 + 4 = 8 s
        CALLER.set(Caller.from_now("b", 10.0))
        with pytest.raises(Overloaded) as refused:
            async with here.admitted(Work(EMBED, 4.0)):
                raise AssertionError("a refused call ran")
        assert refused.value.retry_after_s == pytest.approx(8.0 - 10.0 * ADMIT_MARGIN, abs=0.05)
        assert here._stretched(2.0) == pytest.approx(4.0, abs=0.01)
        assert here._own_within(here._stretched(7.0)) == pytest.approx(7.0, abs=0.01)
        async with here.admitted(Work(EMBED, 1.0)):  # 0.2 s beside a busy sibling: 0.1 s of the machine's time
            await asyncio.sleep(0.2)
        expected = 1.0 + LEARNING_RATE * (max(0.1, 1.0 / SAMPLE_SPAN) - 1.0)
        assert here.costs.factors[EMBED] == pytest.approx(expected, abs=0.02)
        siblings.release.set()
        await asyncio.gather(*siblings.tasks)
        assert here._board is not None and sibling._board is not None and not here._board.others()

    run(test)


@asynccontextmanager
async def caller_of(admission: Admission) -> AsyncIterator[list[Caller]]:
    seen: list[Caller] = []

    async def work() -> None:
        caller = CALLER.get()
        assert caller is not None
        seen.append(caller)

    await admission.run(work())
    yield seen


def test_the_client_id_and_a_shorter_deadline_come_from_the_headers() -> None:
    async def test() -> None:
        request = http_request("/embed", Body(b"{}"), {"X-Client-Id": "team-a", "X-Request-Timeout": "2.5"})
        admission = Admission(4, 60.0, http_request=lambda: request)
        async with caller_of(admission) as seen:
            (caller,) = seen
        assert caller.client == "team-a" and caller.timeout_s == 2.5
        longer = http_request("/embed", Body(b"{}"), {"X-Request-Timeout": "600"})
        async with caller_of(Admission(4, 60.0, http_request=lambda: longer)) as seen:
            assert seen[0].timeout_s == 60.0  # the server's limit holds

    run(test)


@pytest.mark.parametrize(
    ("header", "value"), [("X-Request-Timeout", "soon"), ("X-Request-Timeout", "-1"), ("X-Request-Timeout", "nan"),
                          ("X-Client-Id", ""), ("X-Client-Id", "x" * 129)],
)  # fmt: skip
def test_a_bad_admission_header_is_a_422_naming_it(header: str, value: str) -> None:
    service = InProcessService()
    answer = service.post("/embed", {"sequences": ["MKT"]}, headers={header: value})
    assert answer.status == 422
    assert answer.error["details"][0]["field"] == header


def test_a_request_past_the_clients_own_deadline_is_a_504_naming_it() -> None:
    async def test() -> None:
        request = http_request("/embed", Body(b"{}"), {"X-Request-Timeout": "0.05"})
        admission = Admission(4, 60.0, http_request=lambda: request)
        with pytest.raises(DeadlineExceeded, match="X-Request-Timeout"):
            await admission.run(asyncio.sleep(1))

    run(test)


def test_work_whose_client_disconnects_is_cancelled_and_answered_as_gone() -> None:
    async def test() -> None:
        disconnected = asyncio.Event()

        async def receive() -> dict:
            await disconnected.wait()
            return {"type": "http.disconnect"}

        # as uvicorn answers once the body is read: the next message is the disconnect, when it comes
        request = Request({"type": "http", "method": "POST", "path": "/embed", "query_string": b"", "headers": []}, receive)
        assert http_arrival(request).gone is not None
        admission = Admission(4, 60.0, http_request=lambda: request)
        stopped = asyncio.Event()

        async def work() -> None:
            try:
                await asyncio.sleep(30)
            finally:
                stopped.set()

        answer = asyncio.ensure_future(admission.run(work()))
        await asyncio.sleep(0.01)
        disconnected.set()
        with pytest.raises(ClientGone):
            await answer
        assert stopped.is_set() and admission.in_flight == 0

    run(test)


def test_an_engine_call_through_the_service_runs_under_the_scheduler_and_is_refused_when_it_cannot_finish() -> None:
    service = InProcessService()
    scheduler = service.engine.scheduler
    answer = service.post("/embed", {"sequences": ["MKTAYIAKQR"]})
    assert answer.status == 200 and EMBED in scheduler.costs.factors
    scheduler.costs.factors[EMBED] = 1e4  # as if the worker were that slow now
    refused = service.post("/embed", {"sequences": ["MKTAYIAKQR" * 50]}, headers={"X-Request-Timeout": "1"})
    assert refused.status == 503 and int(refused.headers["retry-after"]) >= 1
    assert refused.error["type"] == "overloaded"
    # bad input is still a 422, never a refusal
    bad = service.post("/embed", {"sequences": ["MKT1"]}, headers={"X-Request-Timeout": "1"})
    assert bad.status == 422 and bad.error["details"][0]["field"] == "sequences[0]"


def test_a_lone_clients_graph_calls_go_first_in_tritons_queue_and_a_flooders_do_not() -> None:
    service = InProcessService()

    async def test() -> None:
        await service.call("/embed", {"sequences": ["MKTAYIAKQR"]}, headers={"X-Client-Id": "lone"})
        assert {call.priority for call in service.runner.calls} == {CallPriority.LONE}
        service.runner.calls.clear()
        flood = [{"sequences": ["MKTAYIAKQR" * (1 + index)]} for index in range(8)]
        await asyncio.gather(*(service.call("/embed", body, headers={"X-Client-Id": "flood"}) for body in flood))
        assert CallPriority.SHARED in {call.priority for call in service.runner.calls}

    asyncio.run(test())


def test_a_waiting_call_whose_time_left_is_now_too_short_is_refused_at_its_turn_not_started() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=10)
        held = Held(scheduler)
        held.send("running", "a", 1.0)
        waiting = held.send("waiting", "b", 1.0, timeout_s=5.0)
        await held.settle()
        scheduler.costs.factors[EMBED] = 8.0  # the worker has slowed down: 8 s for what was 1 s
        held.release.set()
        with pytest.raises(Overloaded, match="too few"):
            await waiting
        assert held.started == ["running"] and not scheduler.waiting and not scheduler.running

    run(test)


def test_a_call_still_waiting_when_only_its_works_time_is_left_is_given_up_before_its_deadline() -> None:
    async def test() -> None:
        scheduler = Scheduler(max_running=1, default_timeout_s=10)
        held = Held(scheduler)
        held.send("running", "a", 0.1, timeout_s=60)  # never ends by itself
        waiting = held.send("waiting", "b", 0.1, timeout_s=1.0)
        await held.settle()
        began = asyncio.get_running_loop().time()
        with pytest.raises(Overloaded, match="waited its turn"):
            await waiting
        # given up at its deadline less its work's time, never started: a 503, not a 504 at 1 s
        assert asyncio.get_running_loop().time() - began < 1.0 - 0.1
        assert held.started == ["running"] and not scheduler.waiting
        held.release.set()
        await asyncio.gather(*held.tasks, return_exceptions=True)

    run(test)


def test_past_the_in_flight_bound_a_request_is_refused_at_once_never_started() -> None:
    async def test() -> None:
        admission = Admission(1, 60.0)
        release = asyncio.Event()
        first = asyncio.ensure_future(admission.run(release.wait()))
        await asyncio.sleep(0)
        started = []

        async def second() -> None:
            started.append(True)

        with pytest.raises(Overloaded, match="BIONEMO_MAX_IN_FLIGHT") as refused:
            await admission.run(second())
        assert refused.value.retry_after_header == "1" and not started
        release.set()
        await first
        assert admission.in_flight == 0

    run(test)


def test_invalid_request_from_a_header_is_raised_before_any_work() -> None:
    async def test() -> None:
        request = http_request("/embed", Body(b"{}"), {"X-Request-Timeout": "0"})
        admission = Admission(4, 60.0, http_request=lambda: request)
        started = []

        async def work() -> None:
            started.append(True)

        with pytest.raises(InvalidRequest):
            await admission.run(work())
        assert not started

    run(test)
