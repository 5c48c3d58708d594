"""`make bench`: /embed against five ways of serving the same esm2nv weights, one after another; writes the report.

    python -m benchmarks.run [--seconds 10] [--users 1 4 16 32] [--contenders service naive ...]

For each server in turn (contenders of one server share it): start it on a free
loopback port and wait for it (bounded), warm every contender up, check its
answers against torch and time sequential one-sequence requests (interleaved
across the contenders of that server), run locust headless for every number of
users, stop it by PID. Then regenerate docs/benchmarks.md and docs/benchmarks.png.
"""

from __future__ import annotations

import argparse
import itertools
import random
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import processes, report
from benchmarks.clients import Embedder
from benchmarks.contenders import CONTENDERS, Contender
from benchmarks.flops import EncoderShape, matmul_gflops
from benchmarks.measure import Point, Probe, probe, run_point
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


def measure_server(
    contenders: list[Contender],
    args: argparse.Namespace,
    sequences: list[str],
    reference: np.ndarray,
    shape: EncoderShape,
) -> tuple[list[Point], dict[str, Probe]]:
    """Every measurement of the contenders that share one server, between its start and its stop."""
    server = contenders[0].server
    log(f"{server.name}: starting")
    running = processes.start(server)
    log(f"{server.name}: ready; warm-up and the sequential probe")
    clients: dict[str, Embedder] = {}
    try:
        clients.update((c.name, c.client(c.url(running))) for c in contenders if c.client is not None)
        rng = random.Random(WARMUP_SEED)
        for _ in range(WARMUP_REQUESTS):
            request = embed_request(rng)
            for client in clients.values():
                client.embed(request.sequences)
        probes = probe(clients, sequences, reference) if clients else {}
        points = []
        for contender in contenders:
            for users in args.users if contender.workload == "embed" else args.generate_users:
                point = run_point(contender, running, users, args.seconds, args.warmup, shape)
                log(
                    f"{contender.name:17} {users:3} users: {point.rate(point.answered):6.2f} req/s "
                    f"p50 {point.percentile(50):8.1f} ms  p99 {point.percentile(99):8.1f} ms  errors {point.errors}  "
                    f"other CPU {100 * point.other_cpu:3.0f} %"
                )
                points.append(point)
        return points, probes
    finally:
        for client in clients.values():
            client.close()
        processes.stop(running)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10, help="measured seconds per point (after the warm-up)")
    parser.add_argument("--warmup", type=float, default=2, help="seconds at the start of each point left out")
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4, 16, 32], help="the concurrency sweep")
    parser.add_argument("--generate-users", type=int, nargs="+", default=[1, 16], help="users for /generate")
    parser.add_argument("--probe", type=int, default=30, help="sequential one-sequence requests per contender")
    parser.add_argument(
        "--contenders", nargs="+", choices=[c.name for c in CONTENDERS], default=[c.name for c in CONTENDERS]
    )
    parser.add_argument("--out", type=Path, default=report.DEFAULT_REPORT, help="the markdown report")
    args = parser.parse_args(argv)
    facts = report.machine_facts()
    log("matmul throughput and the torch reference answers")
    peak = matmul_gflops()
    shape = EncoderShape.from_checkpoint()
    rng = random.Random(PROBE_SEED)
    sequences = [protein(rng) for _ in range(args.probe)]
    reference = torch_answers(sequences)

    chosen = [c for c in CONTENDERS if c.name in args.contenders]
    points: list[Point] = []
    probes: dict[str, Probe] = {}
    for _, group in itertools.groupby(chosen, key=lambda c: c.server):
        group_points, group_probes = measure_server(list(group), args, sequences, reference, shape)
        points += group_points
        probes |= group_probes

    command = "python -m benchmarks.run " + shlex.join(argv if argv is not None else sys.argv[1:])
    report.write(
        args.out,
        report.Run(command, facts, peak, shape, chosen, points, probes, args, time.monotonic() - STARTED),
    )
    log(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
