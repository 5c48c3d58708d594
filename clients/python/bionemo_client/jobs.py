"""A file through a command: chunks within the service's limits, several requests in flight, answers kept in input
order, refused records to the errors file, everything done journaled so that a killed run resumes (journal.py).

    records -> chunks -> requests (a pool of `concurrency`) -> rows, in order -> journal -> output + errors file
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm import tqdm

from bionemo_client import outputs
from bionemo_client.journal import FAILURES, Journal
from bionemo_client.records import Item, Record, Unreadable
from bionemo_client.service import Problem, Service, ServiceError
from bionemo_client.tasks import Task

Failure = tuple[str, int, str]
"""A record that is not in the output: its id, line and why."""

MAX_UNREADABLE_PER_CHUNK = 1024


class JobFailed(RuntimeError):
    """The job stopped: the service refused what every record would need (the model, an option), or stayed away
    past the retries. What was done is journaled; the same command resumes."""


@dataclass(frozen=True)
class Chunk:
    number: int
    records: list[Record]
    unreadable: list[Unreadable]

    @property
    def size(self) -> int:
        return len(self.records) + len(self.unreadable)


@dataclass(frozen=True)
class Summary:
    command: str
    records: int
    failed: int
    resumed: int
    seconds: float
    output: Path
    errors: Path
    retries: str

    @property
    def done(self) -> int:
        return self.records - self.failed

    def line(self) -> str:
        rate = (self.records - self.resumed) / self.seconds if self.seconds > 0 else 0.0
        resumed = f", {self.resumed:,} of them from an earlier run" if self.resumed else ""
        failed = f"{self.failed:,} failed (see {self.errors})" if self.failed else "0 failed"
        return (f"{self.command}: {self.done:,} done, {failed}{resumed}; {self.seconds:.1f} s, {rate:,.1f} records/s; "
                f"retries: {self.retries}; wrote {self.output}")  # fmt: skip


def chunks(items: Iterable[Item], task: Task) -> Iterator[Chunk]:
    """Consecutive records, at most `task.max_items` and `task.max_residues` a chunk (a longer record alone); the same
    chunks for the same file every time, which resume counts on."""
    number, records, unreadable, residues = 0, [], [], 0
    for item in items:
        if isinstance(item, Unreadable):
            unreadable.append(item)
            if len(unreadable) < MAX_UNREADABLE_PER_CHUNK:
                continue
        else:
            size = len(item.text)
            if records and (len(records) >= task.max_items or residues + size > task.max_residues):
                yield Chunk(number, records, unreadable)
                number, records, unreadable, residues = number + 1, [], [], 0
            records.append(item)
            residues += size
            continue
        yield Chunk(number, records, unreadable)
        number, records, unreadable, residues = number + 1, [], [], 0
    if records or unreadable:
        yield Chunk(number, records, unreadable)


def errors_path(output: Path) -> Path:
    """`out.parquet` -> `out.errors.csv`."""
    return output.with_name(f"{output.stem}.errors.csv")


def run(
    task: Task,
    service: Service,
    items: Iterable[Item],
    output: Path,
    *,
    source: dict[str, Any],
    total: int | None = None,
    concurrency: int = 4,
    restart: bool = False,
    progress: bool | None = None,
) -> Summary:
    """Run `task` over `items` into `output` (and its errors file); `source` says what the input is (its path, size,
    modification time), so that a journal is resumed by the same job only. `progress`: None shows a bar on a
    terminal only."""
    fmt = outputs.output_format(output)
    if fmt not in task.writes:
        raise ValueError(f"{output}: {type(task).__name__.lower()} writes {', '.join(task.writes)}, not {fmt}")
    started = time.monotonic()
    identity = {"command": task.identity(), "input": source, "output": output.name}
    journal = Journal(output, identity, task.schema, restart=restart)
    show = sys.stderr.isatty() if progress is None else progress
    bar = tqdm(total=total, initial=journal.resumed_records, unit="seq", disable=not show, dynamic_ncols=True,
               smoothing=0.05, file=sys.stderr)  # fmt: skip
    try:
        with outputs.open_output(output, task.schema, task.file_metadata) as written:
            for batch in journal.rows():  # what earlier runs did, then what this one does, as it comes
                written.write(batch)
            _answer_in_order(task, service, items, journal, written, bar, concurrency)
            written.close()
    finally:
        bar.close()
    errors = errors_path(output)
    failures = pa.concat_tables([*journal.failures(), FAILURES.empty_table()])
    with outputs.open_output(errors, FAILURES) as refused:
        refused.write(failures)
        refused.close()
    journal.remove()
    return Summary(type(task).__name__.lower(), journal.records, failures.num_rows, journal.resumed_records,
                   time.monotonic() - started, output, errors, str(service.retried))  # fmt: skip


def _answer_in_order(
    task: Task, service: Service, items: Iterable[Item], journal: Journal, written: outputs.Output, bar: tqdm,
    concurrency: int,
) -> None:
    """Chunks answered `concurrency` requests at a time, handed in input order to the journal, and each segment the
    journal commits to the output; on a failure, what came before it is journaled and the failure raised."""
    with ThreadPoolExecutor(concurrency, "chunk") as chunk_pool, ThreadPoolExecutor(concurrency, "request") as requests:
        pending: deque[tuple[Chunk, Future[tuple[pa.Table, list[Failure]]]]] = deque()

        def commit() -> None:
            chunk, answered = pending.popleft()
            rows, failures = answered.result()
            committed = journal.add(chunk.number, rows, failures, chunk.size)
            if committed is not None:
                written.write(committed)
            bar.update(chunk.size)

        try:
            for chunk in chunks(items, task):
                if chunk.number < journal.next_chunk:
                    continue
                pending.append((chunk, chunk_pool.submit(answer_chunk, task, service, requests, chunk)))
                while pending and (len(pending) > 2 * concurrency or pending[0][1].done()):
                    commit()
            while pending:
                commit()
        finally:
            for _, answered in pending:
                answered.cancel()
            committed = journal.flush()
            if committed is not None:
                written.write(committed)


def answer_chunk(
    task: Task, service: Service, requests: ThreadPoolExecutor, chunk: Chunk
) -> tuple[pa.Table, list[Failure]]:
    """The rows of the chunk's records, and the records refused with the service's reason; a refusal that names no
    record of the chunk stops the job."""
    failures: list[Failure] = [(item.id, item.line, item.reason) for item in chunk.unreadable]
    live = list(chunk.records)
    while live:
        sent = [requests.submit(service.post, task.path, body) for body in task.requests(live)]
        try:
            answers = [answer.result() for answer in sent]
        except ServiceError as error:
            for answer in sent:
                answer.cancel()
            blamed = task.blamed(error.problems, len(live)) if error.refuses_the_input else {}
            if not blamed:
                raise JobFailed(str(error)) from None
            failures += [(live[i].id, live[i].line, _reason(error, problems)) for i, problems in sorted(blamed.items())]
            live = [record for i, record in enumerate(live) if i not in blamed]
            continue
        return task.rows(live, answers), sorted(failures, key=lambda failure: failure[1])
    return task.schema.empty_table(), sorted(failures, key=lambda failure: failure[1])


def _reason(error: ServiceError, problems: list[Problem]) -> str:
    said = "; ".join(f"{problem.field}: {problem.message}" for problem in problems) or error.message
    return f"HTTP {error.status} {error.kind}: {said}"
