"""Stage-by-stage progress of an export (load, convert, verify, write) for the command line."""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Iterator, Protocol, TextIO


class Progress(Protocol):
    def stage(self, name: str, subject: str) -> AbstractContextManager[None]:
        """Announce stage `name` of `subject` on entry; report its outcome and duration on exit."""
        ...


class Silent:
    """No output: the library default (tests, other programs)."""

    def stage(self, name: str, subject: str) -> AbstractContextManager[None]:
        return nullcontext()


class PrintedProgress:
    """One line when a stage starts and one when it ends, so a slow stage (a 3B checkpoint loading) shows where it is."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    @contextmanager
    def stage(self, name: str, subject: str) -> Iterator[None]:
        started = time.perf_counter()
        self._line(f"{name:<9}{subject} ...")
        try:
            yield
        except BaseException:
            self._line(f"{name:<9}{subject}: failed after {time.perf_counter() - started:.1f} s")
            raise
        self._line(f"{name:<9}{subject}: done in {time.perf_counter() - started:.1f} s")

    def _line(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr, flush=True)  # sys.stderr as it is now, not at import
