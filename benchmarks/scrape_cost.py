"""What GET /metrics costs: one scrape's time, /embed throughput with a scrape every second against none, and the
API workers' CPU per /embed with the service's metrics against a checkout without them.

    python -m benchmarks.scrape_cost [--seconds 15] [--rounds 3] [--users 4] [--requests 300] [--baseline DIR]

Starts this checkout's service (as `make serve` does, on a free loopback port, with a BENTOML_HOME of its own:
BentoML empties the metric files' folder under it at every start), then:

1. scrape time: `--scrapes` sequential GET /metrics on the idle service (wall time, size, and the time the answering
   worker waited for Triton's part, from `bionemo_triton_metrics_fetch_seconds`);
2. throughput: `--users` threads send the benchmark's /embed workload (1-8 proteins of ~270 residues) back to back,
   in alternating windows of `--seconds` without scrapes and with one scrape a second, `--rounds` of each, so that
   both conditions share the machine's drift;
3. API-worker CPU per /embed: `--requests` sequential one-sequence requests, the CPU time the API workers' threads
   spent (/proc/<pid>/task/*/schedstat) divided by the requests. With `--baseline DIR` (a checkout without the
   metrics, e.g. `git worktree add --detach DIR <commit>`) its service is measured the same way first, alone, on
   this checkout's model repository.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from benchmarks import processes
from benchmarks.contenders.this_service import SERVICE
from benchmarks.processes import Running, Server
from benchmarks.worker_cpu import api_workers, cpu_seconds
from benchmarks.workload import MODEL, embed_request

PROTEIN = "MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"


def service_from(checkout: Path, home: str) -> Server:
    """The service of `checkout` (its own code, this checkout's model repository), with its own BENTOML_HOME."""
    return Server(
        name=f"service ({checkout.name})",
        command=SERVICE.command,
        ready_path=SERVICE.ready_path,
        environment=lambda port: {**SERVICE.environment(port), "BENTOML_HOME": home},
        cwd=checkout,
    )


def scrape(session: requests.Session, url: str) -> tuple[float, int, float]:
    """One GET /metrics: wall seconds, bytes, and the seconds the worker waited for Triton's part."""
    started = time.perf_counter()
    answer = session.get(f"{url}/metrics", timeout=30)
    seconds = time.perf_counter() - started
    answer.raise_for_status()
    waited = re.search(r"^bionemo_triton_metrics_fetch_seconds (\S+)$", answer.text, re.MULTILINE)
    return seconds, len(answer.content), float(waited[1]) if waited else float("nan")


def throughput(url: str, users: int, seconds: float, scraping: bool) -> tuple[float, float]:
    """Requests and sequences answered per second by `users` threads sending /embed for `seconds`."""
    stopping = threading.Event()
    answered = [0, 0]
    errors: list[str] = []
    lock = threading.Lock()

    def user(seed: int) -> None:
        rng, session = random.Random(seed), requests.Session()
        while not stopping.is_set():
            request = embed_request(rng)
            response = session.post(f"{url}/embed", json=request.body, timeout=300)
            if response.status_code != 200:
                errors.append(f"{response.status_code}: {response.text[:200]}")
            elif not stopping.is_set():
                with lock:
                    answered[0] += 1
                    answered[1] += len(request.sequences)

    def scraper() -> None:
        session = requests.Session()
        while not stopping.wait(1.0):
            scrape(session, url)

    threads = [threading.Thread(target=user, args=(seed,)) for seed in range(users)]
    threads += [threading.Thread(target=scraper)] if scraping else []
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stopping.set()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} /embed errors, e.g. {errors[0]}")
    return answered[0] / seconds, answered[1] / seconds


def cpu_per_request(running: Running, requests_per_service: int) -> float:
    """API-worker CPU milliseconds per sequential one-sequence /embed, after a warm-up of 10."""
    session, workers = requests.Session(), api_workers(running)
    body = {"sequences": [PROTEIN], "model": MODEL}
    for _ in range(10):
        session.post(f"{running.url}/embed", json=body, timeout=60).raise_for_status()
    before = cpu_seconds(workers)
    for _ in range(requests_per_service):
        session.post(f"{running.url}/embed", json=body, timeout=60).raise_for_status()
    return 1000 * (cpu_seconds(workers) - before) / requests_per_service


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15, help="seconds per throughput window")
    parser.add_argument("--rounds", type=int, default=3, help="windows of each condition, alternating")
    parser.add_argument("--users", type=int, default=4, help="concurrent /embed clients")
    parser.add_argument("--scrapes", type=int, default=50, help="sequential scrapes timed on the idle service")
    parser.add_argument("--requests", type=int, default=300, help="sequential /embed per service for the CPU figure")
    parser.add_argument("--baseline", type=Path, help="a checkout without the metrics, measured beside this one")
    args = parser.parse_args(argv)

    cpu: dict[str, float] = {}
    if args.baseline is not None:  # first, and alone: one service at a time on a shared machine
        with tempfile.TemporaryDirectory(prefix="bentoml-home-") as home:
            baseline = processes.start(service_from(args.baseline.resolve(), home))
            try:
                cpu["baseline"] = cpu_per_request(baseline, args.requests)
            finally:
                processes.stop(baseline)
    with tempfile.TemporaryDirectory(prefix="bentoml-home-") as home:
        running = processes.start(service_from(processes.ROOT, home))
        try:
            url = running.url
            session = requests.Session()
            for _ in range(3):
                session.post(f"{url}/embed", json={"sequences": [PROTEIN]}, timeout=60).raise_for_status()
            scrapes = [scrape(session, url) for _ in range(args.scrapes)]
            wall, size, waited = (sorted(values) for values in zip(*scrapes))
            print(f"scrape: median {1000 * statistics.median(wall):.1f} ms, p95 {1000 * wall[int(0.95 * len(wall))]:.1f} ms "
                  f"({args.scrapes} on the idle service; {statistics.median(size) / 1024:.0f} KiB; "
                  f"Triton's part waited for: median {1000 * statistics.median(waited):.1f} ms)")

            throughput(url, args.users, args.seconds / 3, scraping=False)  # warm-up: Triton's batches, the buckets' shapes
            rates: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
            for _ in range(args.rounds):
                for scraping in (False, True):
                    rates[scraping].append(throughput(url, args.users, args.seconds, scraping))
                    print(f"  {'scrape every 1 s' if scraping else 'no scrapes      '}: "
                          f"{rates[scraping][-1][0]:.2f} req/s, {rates[scraping][-1][1]:.2f} seq/s", flush=True)
            print(f"/embed at {args.users} users, {args.rounds} x {args.seconds:g} s windows of each, alternating:")
            for scraping, label in ((False, "no scrapes"), (True, "a scrape every second")):
                print(f"  {label:22}: median {statistics.median(r for r, _ in rates[scraping]):.2f} req/s, "
                      f"{statistics.median(s for _, s in rates[scraping]):.2f} seq/s")
            cpu["metrics"] = cpu_per_request(running, args.requests)
        finally:
            processes.stop(running)
    print(f"API-worker CPU per sequential one-sequence /embed ({args.requests} requests, after 10 unmeasured):")
    for name, milliseconds in cpu.items():
        print(f"  {name:8}: {milliseconds:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
