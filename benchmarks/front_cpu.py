"""What each front costs its API workers: CPU per sequential /embed of the bench's mix, the servers up side by side.

Starts the service (HTTP), its gRPC front (`serving.launch --grpc`) and, for each `--grpc-variant KEY=VALUE`, one
more gRPC server with that in its environment (`GRPC_EXPERIMENTS=` serves on grpcio's default I/O path); sends
the same block of requests to each in turn, in alternating order, and counts the CPU time of each server's API
workers (`/proc/<pid>/task/*/schedstat`, nanoseconds, every thread) over its blocks. The machine's drift weighs
on all alike; Triton's own time is not counted.

    python -m benchmarks.front_cpu --blocks 8 --block 40 --grpc-variant GRPC_EXPERIMENTS=
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from pathlib import Path

import numpy as np
import psutil

from benchmarks.clients import Embedder, GrpcEmbedder, HttpJsonEmbedder
from benchmarks.contenders.this_service import SERVICE, SERVICE_GRPC
from benchmarks.processes import Running, Server, start, stop
from benchmarks.report import machine_facts
from benchmarks.workload import embed_request


def grpc_variant(assignment: str) -> Server:
    """The gRPC front with `KEY=VALUE` added to its environment."""
    key, _, value = assignment.partition("=")
    environment = lambda port: {**SERVICE_GRPC.environment(port), key: value}  # noqa: E731
    return dataclasses.replace(SERVICE_GRPC, name=f"service-grpc {assignment}", environment=environment)


def api_workers(running: Running) -> list[psutil.Process]:
    return [process for process in running.descendants if any("api_server" in part for part in process.cmdline())]


def cpu_seconds(workers: list[psutil.Process]) -> float:
    """CPU time of every thread of `workers` so far, from the scheduler's own count (not tick-granular)."""
    nanoseconds = 0
    for worker in workers:
        for stat in Path(f"/proc/{worker.pid}/task").glob("*/schedstat"):
            try:
                nanoseconds += int(stat.read_text().split()[0])
            except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
                continue
    return nanoseconds / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=8, help="blocks of requests per server")
    parser.add_argument("--block", type=int, default=40, help="sequential requests per block")
    parser.add_argument("--grpc-variant", action="append", default=[], help="KEY=VALUE: one more gRPC server with it")
    args = parser.parse_args(argv)
    servers = [SERVICE, SERVICE_GRPC, *map(grpc_variant, args.grpc_variant)]
    running: list[Running] = []
    clients: dict[str, Embedder] = {}
    try:
        for server in servers:
            running.append(start(server))
            clients[server.name] = (GrpcEmbedder if server.grpc else HttpJsonEmbedder)(running[-1].url)
        workers = {started.server.name: api_workers(started) for started in running}
        requests = [embed_request(random.Random(seed)).sequences for seed in range(args.block)]
        for client in clients.values():  # warm-up: connections, Triton's shapes
            for sequences in requests[:10]:
                client.embed(sequences)
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
    finally:
        for client in clients.values():
            client.close()
        for started in running:
            stop(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
