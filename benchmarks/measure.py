"""One measurement point: locust headless against a running contender, then the driver's own statistics.

A point runs `warmup + seconds`; then locust lets every user finish the
request it is waiting for, so nothing is abandoned in a server's queue (it
would still be computed, and slow the next point down). Throughput counts the
successful requests answered inside the measured window; latencies are those
of the requests sent inside it, each from its own timer (locust's summary
rounds them), however long after the window they were answered. Errors count
over the whole run. For the contenders that ask (`Contender.api_workers`: the
service's fronts, and direct-triton for their background), the CPU time the
service's BentoML API workers' threads spent in the same window
(benchmarks.worker_cpu, read every 0.1 s during the run).

Not each request's work by the share of its time inside the window: that is
the work done in it only once every user's requests take as long as each
other, and the one-at-a-time baselines never get there within a point (at 32
users the naive server's first answers come after 0.5 s, its later ones after
15 s): counted so, PyTriton's seq/s at 32 users came out twice its answers'.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

from benchmarks.clients import Embedder, TritonTotals, triton_totals
from benchmarks.contenders import Contender
from benchmarks.flops import EncoderShape
from benchmarks.processes import ROOT, Running
from benchmarks.worker_cpu import WorkerCpu
from bionemo_serving.exporter.quantize import worst_cosine

DRAIN_S = 180
"""Most seconds locust waits, after a point, for the requests its users are still waiting for."""


@dataclass(frozen=True)
class Point:
    contender: str
    users: int
    seconds: float
    answered: int
    """Successful requests answered in the measured window."""
    errors: int
    latencies_ms: list[float]
    """Of the successful requests sent in the measured window."""
    sequences: int
    residues: int
    samples: int
    model_flops: float
    """Useful model FLOPs (flops.FORMULA) of the requests answered in the window."""
    triton: TritonTotals | None
    """What Triton did during the whole point; None where no Triton is involved."""
    other_cpu: float
    """Share of the machine's CPU time taken by processes that are neither the contender nor locust."""
    window_rates: tuple[float, ...]
    """Sequences per second in each repeat merged into this point (`merged`): how far two repeats of one server
    and the same requests differ is the noise any ratio of two such points carries."""
    api_workers: int = 0
    """The server's BentoML API worker processes counted (`Contender.api_workers`); 0: not counted."""
    api_worker_cpu_s: float | None = None
    """CPU seconds their threads spent in the measured window (benchmarks.worker_cpu); None: not counted, or a
    worker ended or was restarted during the point."""

    def api_worker_cpu_ms(self) -> float | None:
        """API-worker CPU milliseconds per request answered in the window."""
        if self.api_worker_cpu_s is None or not self.answered:
            return None
        return 1000 * self.api_worker_cpu_s / self.answered

    def rate(self, count: float) -> float:
        return count / self.seconds

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")

    @classmethod
    def from_json(cls, fields: dict) -> Point:
        """A point as its record holds it (dataclasses.asdict)."""
        triton = fields["triton"] and TritonTotals(**fields["triton"])
        return cls(**{**fields, "triton": triton, "window_rates": tuple(fields["window_rates"])})


def merged(windows: list[Point]) -> Point:
    """One point of a contender's repeats at the same users: counts and seconds added, latencies pooled."""
    first, seconds = windows[0], sum(window.seconds for window in windows)
    tritons = [window.triton for window in windows if window.triton is not None]
    cpus = [window.api_worker_cpu_s for window in windows]
    return Point(
        contender=first.contender,
        users=first.users,
        seconds=seconds,
        answered=sum(window.answered for window in windows),
        errors=sum(window.errors for window in windows),
        latencies_ms=[ms for window in windows for ms in window.latencies_ms],
        sequences=sum(window.sequences for window in windows),
        residues=sum(window.residues for window in windows),
        samples=sum(window.samples for window in windows),
        model_flops=sum(window.model_flops for window in windows),
        triton=sum(tritons[1:], tritons[0]) if tritons else None,
        other_cpu=sum(window.other_cpu * window.seconds for window in windows) / seconds,
        window_rates=tuple(rate for window in windows for rate in window.window_rates),
        api_workers=max(window.api_workers for window in windows),
        api_worker_cpu_s=None if None in cpus else sum(cpu for cpu in cpus if cpu is not None),
    )


@dataclass(frozen=True)
class Probe:
    """Sequential one-sequence requests, one round: latency without queueing, and every answer against torch's."""

    latencies_ms: list[float]
    max_abs_difference: float
    worst_cosine: float


PROBE_ORDER_SEED = 7
"""Seeds the probe's `order`, one generator over all its rounds."""


def probe(
    clients: dict[str, Embedder], sequences: list[str], reference: np.ndarray, order: random.Random
) -> dict[str, Probe]:
    """One round: each sequence to every client in turn (interleaved, so drift hits all alike); `reference`: torch's
    answers, against which every answer is held.

    The order is shuffled anew for every sequence (seeded), so that each contender follows each other one about
    equally often. In a cyclic order each follows the same one every time, and what comes before a request
    changes it: after a torch server's answer the next request took about 3 ms longer, so the service, always
    right after bentoml-batching, came out 4.5 ms behind direct Triton where a shuffled order, on the same
    servers and proteins, gave 0.4 and 1.9 ms (AMD EPYC). And Triton hands sequential calls to its two
    instances in turn: in a fixed order each contender would always get the same one (1.8 ms apart at 50 ms).
    """
    latencies: dict[str, list[float]] = {name: [] for name in clients}
    answers: dict[str, list[np.ndarray]] = {name: [] for name in clients}
    for sequence in sequences:
        names = list(clients)
        order.shuffle(names)
        for name in names:
            client = clients[name]
            started = time.perf_counter()
            answers[name].append(client.embed([sequence])[0])
            latencies[name].append((time.perf_counter() - started) * 1000)
    probes = {}
    for name in clients:
        stacked = np.stack(answers[name])
        difference = float(np.abs(stacked - reference).max())
        probes[name] = Probe(latencies[name], difference, worst_cosine(stacked, reference))
    return probes


def _cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _cpu_snapshot(server_processes: list[psutil.Process]) -> tuple[float, float, float, float]:
    """Wall seconds, and CPU seconds of: the whole machine, the contender's processes, this driver's finished
    children (the locust runs). Their difference tells how busy something else kept the machine."""
    machine = psutil.cpu_times()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        time.monotonic(),
        machine.user + machine.nice + machine.system + machine.irq + machine.softirq,
        _cpu_seconds(server_processes),
        children.ru_utime + children.ru_stime,
    )


def _locust(contender: Contender, url: str, users: int, run_time: float) -> dict:
    """The locustfile's record of one headless run: its start and every request. Locust takes whole seconds: a
    fractional `run_time` (half of an odd --seconds) runs to the next one, past the window, which stays as asked."""
    results_path = Path(tempfile.mkstemp(prefix="bench-locust-", suffix=".json")[1])
    command = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "locustfile.py"), contender.user_class, "--headless",
        "--users", str(users), "--spawn-rate", str(users), "--run-time", f"{math.ceil(run_time)}s", "--host", url,
        "--stop-timeout", str(DRAIN_S), "--bench-results", str(results_path), "--only-summary", "--loglevel", "ERROR",
        "--exit-code-on-error", "0",
    ]  # fmt: skip
    try:
        finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=run_time + 2 * DRAIN_S)
        if finished.returncode != 0 or not results_path.stat().st_size:
            raise RuntimeError(
                f"locust failed ({finished.returncode}) for {contender.name}:\n{finished.stderr[-3000:]}"
            )
        return json.loads(results_path.read_text())
    finally:
        results_path.unlink(missing_ok=True)


def run_point(
    contender: Contender, running: Running, users: int, seconds: float, warmup: float, shape: EncoderShape
) -> Point:
    url = contender.url(running)
    triton = (contender.triton_url(running), contender.triton_model) if contender.triton_url else None
    server_processes = [psutil.Process(running.process.pid), *running.descendants]
    triton_before = triton_totals(*triton) if triton else None
    workers = WorkerCpu(running) if contender.api_workers else None
    cpu_before = _cpu_snapshot(server_processes)
    with workers or contextlib.nullcontext():
        run = _locust(contender, url, users, warmup + seconds)
    wall, machine, server, locust = np.subtract(_cpu_snapshot(server_processes), cpu_before)
    triton_during = triton_totals(*triton) - triton_before if triton else None

    window_start = run["started"] + warmup
    window_end = window_start + seconds
    worker_cpu = None if workers is None or workers.changed else workers.between(window_start, window_end)
    succeeded = [r for r in run["requests"] if r["ok"]]
    answered = [r for r in succeeded if window_start <= r["start"] + r["ms"] / 1000 <= window_end]

    def total(key: str) -> int:
        return sum(r.get(key, 0) for r in answered)

    return Point(
        contender=contender.name,
        users=users,
        seconds=seconds,
        answered=len(answered),
        errors=sum(not r["ok"] for r in run["requests"]),
        latencies_ms=[r["ms"] for r in succeeded if window_start <= r["start"] <= window_end],
        sequences=total("sequences"),
        residues=total("residues"),
        samples=total("samples"),
        model_flops=shape.flops(total("tokens"), total("token_pairs")),
        triton=triton_during,
        other_cpu=float(max(0.0, machine - server - locust) / (wall * (os.cpu_count() or 1))),
        window_rates=(total("sequences") / seconds,),
        api_workers=len(workers.processes) if workers else 0,
        api_worker_cpu_s=worker_cpu,
    )
