"""What each front costs its API workers: CPU per sequential /embed of the bench's mix, the servers up side by side.

Starts the service (HTTP), its gRPC front (`serving.startup.launch --grpc`) and, for each `--grpc-variant KEY=VALUE`, one
more gRPC server with that in its environment (`GRPC_EXPERIMENTS=` serves on grpcio's default I/O path); sends
the same block of requests to each in turn, in alternating order, and counts the CPU time of each server's API
workers (benchmarks.worker_cpu: `/proc/<pid>/task/*/schedstat`, every thread) over its blocks. The machine's drift
weighs on all alike; Triton's own time is not counted.

    python -m benchmarks.front_cpu --blocks 8 --block 40 --grpc-variant GRPC_EXPERIMENTS=
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys

import numpy as np

from benchmarks.contenders import CONTENDERS, Contender
from benchmarks.report import machine_facts
from benchmarks.run import servers_up
from benchmarks.worker_cpu import api_workers, cpu_seconds
from benchmarks.workload import embed_request

FRONTS = ("service", "service-grpc")
"""The contenders (benchmarks.contenders) whose API workers are counted: /embed over HTTP, and the gRPC front."""


def grpc_variant(assignment: str) -> Contender:
    """The gRPC front's contender, its server with `KEY=VALUE` added to the environment."""
    key, _, value = assignment.partition("=")
    grpc = next(c for c in CONTENDERS if c.name == "service-grpc")
    environment = lambda port: {**grpc.server.environment(port), key: value}  # noqa: E731
    server = dataclasses.replace(grpc.server, name=f"service-grpc {assignment}", environment=environment)
    return dataclasses.replace(grpc, name=server.name, server=server, alternates_with=None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=8, help="blocks of requests per server")
    parser.add_argument("--block", type=int, default=40, help="sequential requests per block")
    parser.add_argument("--grpc-variant", action="append", default=[], help="KEY=VALUE: one more gRPC server with it")
    args = parser.parse_args(argv)
    contenders = [*(c for c in CONTENDERS if c.name in FRONTS), *map(grpc_variant, args.grpc_variant)]
    with servers_up(contenders, "for the CPU count") as (running, clients):
        workers = {c.name: api_workers(running[c.server]) for c in contenders}
        requests = [embed_request(random.Random(seed)).sequences for seed in range(args.block)]
        per_request: dict[str, list[float]] = {name: [] for name in clients}
        names = list(clients)
        for block in range(args.blocks):
            for name in names if block % 2 == 0 else names[::-1]:
                before = cpu_seconds(workers[name])
                for sequences in requests:
                    clients[name].embed(sequences)
                per_request[name].append((cpu_seconds(workers[name]) - before) * 1000 / args.block)
    print(f"{machine_facts()['cpu']}; {args.blocks} blocks of {args.block} sequential /embed requests each\n")
    print("| server | API workers | CPU per request in each block (ms) | median (ms) |")
    print("|---|---:|---|---:|")
    for name, values in per_request.items():
        blocks = ", ".join(f"{ms:.2f}" for ms in values)
        print(f"| {name} | {len(workers[name])} | {blocks} | {np.median(values):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
