"""The service's BentoML API workers, and the CPU time their threads spend in each of `make bench`'s windows.

API workers are the processes BentoML starts as `python -m bentoml_cli.worker.http_api_server` (`serve`) or
`python -m bentoml_cli.worker.grpc_api_server` (`serve-grpc`), found by that module among the argv of the server's
descendants; not tritonserver, its python-backend stubs, the runner or the gRPC metrics server. CPU time is the
kernel's own count of each thread's time on a CPU, user and system together (`/proc/<pid>/task/<tid>/schedstat`,
first field, nanoseconds; not tick-granular).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Self

import numpy as np
import psutil

from benchmarks.processes import Running

API_WORKER_MODULES = ("bentoml_cli.worker.http_api_server", "bentoml_cli.worker.grpc_api_server")
SAMPLE_INTERVAL_S = 0.1
"""How often `WorkerCpu` reads the threads' counts during a point."""

Thread = tuple[int, int]
"""(pid, tid)."""


def api_workers(running: Running) -> list[psutil.Process]:
    """The API worker processes among what `running` has started, as they are now (a worker BentoML restarted is
    the new one); LookupError if there is none."""
    try:
        candidates = psutil.Process(running.process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        candidates = running.descendants
    workers = []
    for process in candidates:
        try:
            if set(process.cmdline()) & set(API_WORKER_MODULES):
                workers.append(process)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    if not workers:
        raise LookupError(f"no API worker among {running.server.name}'s processes:\n{running.log_tail()}")
    return workers


def thread_cpu_ns(processes: list[psutil.Process]) -> dict[Thread, int]:
    """Every live thread of `processes`: its CPU time so far, in nanoseconds."""
    times: dict[Thread, int] = {}
    for process in processes:
        for stat in Path(f"/proc/{process.pid}/task").glob("*/schedstat"):
            try:
                times[process.pid, int(stat.parent.name)] = int(stat.read_text().split()[0])
            except (OSError, ValueError, IndexError):  # a thread (or process) that ended meanwhile
                continue
    return times


class WorkerCpu:
    """While open, a thread reads the threads' counts of `processes` every SAMPLE_INTERVAL_S; `between(start, end)`
    is then their CPU seconds between two `time.time()` instants (linear between the samples around each).

    Each thread's last count read is kept, so one that ends loses only what it spent after that read (at most an
    interval) instead of its whole time; one that starts counts from zero. `changed`: the set of processes was not
    the same at the end (a worker ended or was restarted), so the count is not the whole of the workers' CPU.
    """

    def __init__(self, running: Running) -> None:
        self.running = running
        self.processes = api_workers(running)
        self.last: dict[Thread, int] = {}
        self.retired_ns = 0
        """Counts of threads whose tid came back with a lower count (a new thread of a reused tid)."""
        self.samples: list[tuple[float, int]] = []
        self.stopping = threading.Event()
        self.sampler = threading.Thread(target=self._run, name="api-worker-cpu", daemon=True)
        self.changed = False

    def _sample(self) -> None:
        for thread, ns in thread_cpu_ns(self.processes).items():
            if ns < self.last.get(thread, 0):
                self.retired_ns += self.last[thread]
            self.last[thread] = ns
        self.samples.append((time.time(), self.retired_ns + sum(self.last.values())))

    def _run(self) -> None:
        while not self.stopping.wait(SAMPLE_INTERVAL_S):
            self._sample()

    def __enter__(self) -> Self:
        self._sample()
        self.sampler.start()
        return self

    def __exit__(self, *exception: object) -> None:
        self.stopping.set()
        self.sampler.join()
        self._sample()
        try:
            now = {process.pid for process in api_workers(self.running)}
        except LookupError:
            now = set()
        self.changed = now != {process.pid for process in self.processes}

    def between(self, start: float, end: float) -> float:
        times, counts = np.array(self.samples, dtype=float).T
        return float(np.interp(end, times, counts) - np.interp(start, times, counts)) / 1e9
