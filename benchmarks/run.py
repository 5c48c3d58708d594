"""`make bench`: /embed against five ways of serving the same esm2nv weights, one after another; writes the report.

    python -m benchmarks.run [--seconds 10] [--users 1 4 16 32] [--contenders service naive ...]

First every server at once, each on a free loopback port (waited for, bounded):
sequential one-sequence requests, each sequence to every contender in turn, with
the answers checked against torch; so the lone-request latencies are compared
request by request, not minutes apart on a machine whose speed drifts. Then for
each server in turn (contenders of one server share it): start it, warm every
contender up, run locust headless for every number of users, stop it by PID. A
contender compared with one of another server (the gRPC front with /embed over
HTTP) runs with both servers up, in alternating windows with it.
Then the deep mutational scan of issue 29 (benchmarks.mutational_scan): the service started alone, its /score scan
of a protein of each --scan-lengths timed beside transformers and esm-cpp. Then regenerate this CPU's report,
docs/benchmarks-<cpu>.md (e.g. benchmarks-amd-epyc.md), and its .png.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import random
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks import mutational_scan, processes, report
from benchmarks.clients import Embedder
from benchmarks.contenders import CONTENDERS, Contender
from benchmarks.contenders.this_service import SERVICE
from benchmarks.flops import EncoderShape, matmul_gflops
from benchmarks.measure import Point, Probe, merged, probe, run_point
from benchmarks.processes import Running, Server
from benchmarks.torch_esm import TorchEmbedder
from benchmarks.workload import embed_request, protein

WARMUP_REQUESTS = 3
PROBE_SEED, WARMUP_SEED = 1_000_001, 1_000_002  # apart from the users' seeds 0, 1, 2, ...
STARTED = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:5.0f} s] {message}", flush=True)


def torch_answers(sequences: list[str]) -> np.ndarray:
    """What transformers answers for each sequence alone: every contender's probe answers are held against it."""
    model = TorchEmbedder()
    return np.concatenate([model.embed([sequence]) for sequence in sequences])


def warm_up(clients: dict[str, Embedder]) -> None:
    rng = random.Random(WARMUP_SEED)
    for _ in range(WARMUP_REQUESTS):
        request = embed_request(rng)
        for client in clients.values():
            client.embed(request.sequences)


@contextlib.contextmanager
def servers_up(
    contenders: list[Contender], purpose: str
) -> Iterator[tuple[dict[Server, Running], dict[str, Embedder]]]:
    """The servers of `contenders` started (each waited for, bounded) and a client of every contender that has one,
    warmed up; on the way out the clients closed and the servers stopped by PID. Yields both."""
    running: dict[Server, Running] = {}
    clients: dict[str, Embedder] = {}
    try:
        for server in dict.fromkeys(c.server for c in contenders):
            log(f"{server.name}: starting, {purpose}")
            running[server] = processes.start(server)
        clients.update((c.name, c.client(c.url(running[c.server]))) for c in contenders if c.client is not None)
        log(f"{', '.join(server.name for server in running)}: ready; warm-up")
        warm_up(clients)
        yield running, clients
    finally:
        for client in clients.values():
            client.close()
        for started in running.values():
            processes.stop(started)


def measure_lone_requests(contenders: list[Contender], sequences: list[str], reference: np.ndarray) -> dict[str, Probe]:
    """The sequential probe of every contender with a client, all their servers running at once."""
    with servers_up([c for c in contenders if c.client is not None], "for the sequential probe") as (_, clients):
        log(f"sequential probe: {len(sequences)} proteins to each of {', '.join(clients)} in turn")
        return probe(clients, sequences, reference) if clients else {}


def measure_server(
    contenders: list[Contender], args: argparse.Namespace, shape: EncoderShape, alternating: list[Contender]
) -> list[Point]:
    """Every throughput point of the contenders that share one server, between its start and its stop.

    `alternating`: contenders of other servers, each compared with one of these (`alternates_with`), their servers
    up beside this one and measured in turn with it (`measure_at`): drift over the minutes then weighs on both alike,
    where two sweeps minutes apart differed by ±6 % from run to run.
    """
    with servers_up([*contenders, *alternating], "for the throughput sweep") as (running, _):
        points = []
        for contender in contenders:
            pair = [contender, *(c for c in alternating if c.alternates_with == contender.name)]
            for users in args.users if contender.workload == "embed" else args.generate_users:
                measured = measure_at(pair, running, users, args, shape)
                for point in measured:
                    log(
                        f"{point.contender:17} {users:3} users: {point.rate(point.answered):6.2f} req/s p50 "
                        f"{point.percentile(50):8.1f} ms  p99 {point.percentile(99):8.1f} ms  errors {point.errors}  "
                        f"other CPU {100 * point.other_cpu:3.0f} %"
                    )
                points += measured
        return points


def measure_at(
    pair: list[Contender], running: dict[Server, Running], users: int, args: argparse.Namespace, shape: EncoderShape
) -> list[Point]:
    """A contender alone over the whole seconds; with the ones that alternate with it, each in mirrored windows of
    half the seconds (A B B A), a contender's windows merged into one point."""
    if len(pair) == 1:
        (contender,) = pair
        return [run_point(contender, running[contender.server], users, args.seconds, args.warmup, shape)]
    windows = [
        run_point(c, running[c.server], users, args.seconds / 2, args.warmup, shape) for c in [*pair, *reversed(pair)]
    ]
    return [merged([window for window in windows if window.contender == c.name]) for c in pair]


SCANNING_SERVICE = dataclasses.replace(
    SERVICE, environment=lambda port: {**SERVICE.environment(port), "BIONEMO_REQUEST_TIMEOUT_S": "3600"}
)
"""The service with room for a 1,000-residue scan: 1,000 model passes take minutes on 2 cores, past the default
deadline (BIONEMO_REQUEST_TIMEOUT_S, 120 s), which would answer a 504."""


def measure_scan(lengths: list[int]) -> mutational_scan.ScanRun:
    """The scans, with the service alone on the machine beside the in-process contenders."""
    log(f"{SERVICE.name}: starting, for the mutational scan of {', '.join(map(str, lengths))} residues")
    running = processes.start(SCANNING_SERVICE)
    try:
        return mutational_scan.measure(lengths, f"http://127.0.0.1:{running.port}")
    finally:
        processes.stop(running)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10, help="measured seconds per point (after the warm-up)")
    parser.add_argument("--warmup", type=float, default=2, help="seconds at the start of each point left out")
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4, 16, 32], help="the concurrency sweep")
    parser.add_argument("--generate-users", type=int, nargs="+", default=[1, 16], help="users for /generate")
    parser.add_argument("--probe", type=int, default=60, help="sequential one-sequence requests per contender")
    parser.add_argument(
        "--contenders", nargs="+", choices=[c.name for c in CONTENDERS], default=[c.name for c in CONTENDERS]
    )
    parser.add_argument(
        "--scan-lengths", type=int, nargs="*", default=[100, 300, 1000], help="residues of each protein scanned"
    )
    parser.add_argument("--out", type=Path, help="the markdown report (default: docs/benchmarks-<this CPU>.md)")
    args = parser.parse_args(argv)
    facts = report.machine_facts()
    args.out = args.out or report.default_report(facts["cpu model"])
    log("matmul throughput and the torch reference answers")
    peak = matmul_gflops()
    shape = EncoderShape.from_checkpoint()
    rng = random.Random(PROBE_SEED)
    sequences = [protein(rng) for _ in range(args.probe)]
    reference = torch_answers(sequences)

    chosen = [c for c in CONTENDERS if c.name in args.contenders]
    probes = measure_lone_requests(chosen, sequences, reference)
    points: list[Point] = []
    alternating = [c for c in chosen if c.alternates_with in {other.name for other in chosen}]
    for _, group in itertools.groupby([c for c in chosen if c not in alternating], key=lambda c: c.server):
        members = list(group)
        partners = [c for c in alternating if c.alternates_with in {member.name for member in members}]
        points += measure_server(members, args, shape, partners)
    scan = measure_scan(args.scan_lengths) if args.scan_lengths else None

    command = "python -m benchmarks.run " + shlex.join(argv if argv is not None else sys.argv[1:])
    report.write(
        args.out,
        report.Run(command, facts, peak, shape, chosen, points, probes, scan, args, time.monotonic() - STARTED),
    )
    log(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
