"""What a job has done so far, on disk, so that a run killed at any point (even `kill -9`) resumes where it stopped.

`OUTPUT.partial/` holds `job.json` (what the job is: its command, options and input) and segments: the rows and
the refused records of consecutive chunks, in input order, as Arrow IPC files named by their first and last chunk.
A segment becomes part of the journal by one atomic rename, after its errors file and its own bytes are on disk: a
kill leaves whole segments and, at worst, a temporary file, which the next run deletes. The next run skips the
chunks the segments hold and goes on from the first one missing; at the end the output is written from the segments
in order (outputs.py), so its rows are an uninterrupted run's: none lost, none twice.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

FAILURES = pa.schema([("id", pa.string()), ("line", pa.int64()), ("reason", pa.string())])
RECORDS_KEY = b"records"


class JournalMismatch(RuntimeError):
    """The partial results beside the output are another job's (another command, option or input)."""


@dataclass(frozen=True)
class Segment:
    first: int
    last: int
    path: Path

    @property
    def failures_path(self) -> Path:
        return self.path.with_suffix(".errors.arrow")


class Journal:
    """The journal of the job `identity` writing `output`. `restart` discards partial results of any job."""

    FLUSH_ROWS = 8192
    FLUSH_SECONDS = 2.0

    def __init__(self, output: Path, identity: dict[str, Any], schema: pa.Schema, restart: bool = False) -> None:
        self.folder = output.with_name(output.name + ".partial")
        self.schema = schema
        if restart and self.folder.exists():
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        description = self.folder / "job.json"
        wanted = json.dumps(identity, sort_keys=True, indent=1)
        if description.exists():
            if description.read_text() != wanted:
                raise JournalMismatch(
                    f"{self.folder} holds the partial results of another job ({description.read_text()!r}); "
                    "run that job again to finish it, or pass --restart to discard them"
                )
        else:
            _write_atomically(description, wanted.encode())
        for leftover in self.folder.glob("*.tmp"):
            leftover.unlink()
        self.segments = self._whole_segments()
        self.next_chunk = self.segments[-1].last + 1 if self.segments else 0
        self.resumed_records = sum(_records(segment.path) for segment in self.segments)
        self.records = self.resumed_records
        """Records journaled, answered or refused: those resumed and those added since."""
        self._pending: list[tuple[int, pa.Table, list[tuple[str, int, str]], int]] = []
        self._pending_rows = 0
        self._last_flush = time.monotonic()

    def _whole_segments(self) -> list[Segment]:
        """The segments that continue one another from chunk 0; any other file is a kill's leftover, deleted."""
        found = []
        for path in self.folder.glob("*-*.arrow"):
            if path.name.endswith(".errors.arrow"):
                continue
            first, last = (int(part) for part in path.stem.split("-"))
            found.append(Segment(first, last, path))
        kept, expected = [], 0
        for segment in sorted(found, key=lambda segment: segment.first):
            if segment.first != expected:
                break
            kept.append(segment)
            expected = segment.last + 1
        names = {segment.path.name for segment in kept} | {segment.failures_path.name for segment in kept}
        for path in self.folder.glob("*.arrow"):
            if path.name not in names:
                path.unlink()
        return kept

    def add(
        self, chunk: int, rows: pa.Table, failures: list[tuple[str, int, str]], records: int
    ) -> pa.Table | None:
        """Chunk `chunk`'s rows and refused records (id, line, reason); chunks come in order. Written in segments of
        about FLUSH_ROWS rows or FLUSH_SECONDS, whichever comes first: the rows of a segment written now, if one is."""
        self._pending.append((chunk, rows, failures, records))
        self.records += records
        self._pending_rows += rows.num_rows + len(failures)
        if self._pending_rows >= self.FLUSH_ROWS or time.monotonic() - self._last_flush >= self.FLUSH_SECONDS:
            return self.flush()
        return None

    def flush(self) -> pa.Table | None:
        """Write what was added since the last segment as one; its rows, or None where nothing was."""
        if not self._pending:
            return None
        first, last = self._pending[0][0], self._pending[-1][0]
        segment = Segment(first, last, self.folder / f"{first:09d}-{last:09d}.arrow")
        rows = pa.concat_tables([rows for _, rows, _, _ in self._pending])
        failures = [failure for _, _, chunk_failures, _ in self._pending for failure in chunk_failures]
        records = sum(count for *_, count in self._pending)
        failed = pa.table(list(zip(*failures)) if failures else [[], [], []], schema=FAILURES)
        _write_table(segment.failures_path, failed)
        _write_table(segment.path, rows.replace_schema_metadata({RECORDS_KEY: str(records).encode()}))
        self.segments.append(segment)
        self._pending, self._pending_rows, self._last_flush = [], 0, time.monotonic()
        return rows

    def rows(self) -> Iterator[pa.RecordBatch]:
        """Every row written so far, in input order, one record batch at a time."""
        for segment in self.segments:
            with pa.OSFile(str(segment.path)) as source:  # read into memory: a batch outlives the file
                reader = ipc.open_file(source)
                for number in range(reader.num_record_batches):
                    yield reader.get_batch(number).replace_schema_metadata(None)

    def failures(self) -> Iterator[pa.Table]:
        for segment in self.segments:
            with pa.OSFile(str(segment.failures_path)) as source:
                yield ipc.open_file(source).read_all()

    def remove(self) -> None:
        shutil.rmtree(self.folder)


def _records(path: Path) -> int:
    with pa.OSFile(str(path)) as source:
        return int(ipc.open_file(source).schema.metadata[RECORDS_KEY])


def _write_table(path: Path, table: pa.Table) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with pa.OSFile(str(temporary), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    _commit(temporary, path)


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    _commit(temporary, path)


def _commit(temporary: Path, path: Path) -> None:
    """`temporary`'s bytes on disk, then renamed to `path`, then the rename itself on disk."""
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
