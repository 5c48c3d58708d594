"""The HTTP and gRPC fronts over one tritonserver: one protein at a time to each in turn, then both driven at once.

`make bench` compares the gRPC front (`serve-grpc`, its own tritonserver) with /embed over HTTP in alternating
windows, and one server's own windows a minute apart differ by up to a quarter on a shared machine. Here the two
fronts share everything but the front: the service starts as everywhere (`serving.startup.launch`), and the gRPC API
workers `serve-grpc` would run (BentoML's `bentoml_cli.worker.grpc_api_server`, as many as the HTTP ones, with the
environment `serving.startup.launch --grpc` gives them) are pointed at the service's own tritonserver through BentoML's
runner map. Then:

- lone requests: each protein to HTTP, gRPC and Triton directly, in shuffled order; paired medians;
- load: for each users' count, both fronts driven by that many locust users each, at the same time, so the
  machine's speed from one second to the next weighs on both alike; their seq/s and its ratio.

    python -m benchmarks.front_pair --probe 150 --residues 28 270 --users 2 8 16 --seconds 20
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from benchmarks.clients import triton_address
from benchmarks.contenders import CONTENDERS
from benchmarks.contenders.this_service import SERVICE, SERVICE_GRPC, tritonserver_url
from benchmarks.flops import EncoderShape
from benchmarks.front_floor import paired_rows
from benchmarks.measure import run_point
from benchmarks.processes import ROOT, Server, start, stop
from benchmarks.report import machine_facts
from benchmarks.run import servers_up, warm_up
from serving.startup.launch import serve_command
from serving.startup.settings import TRITON_METRICS_PORT_VARIABLE, Settings


def grpc_workers_over(triton: str) -> Server:
    """The gRPC front's API workers, started by this module (`--grpc-workers`), over the tritonserver at `triton`."""

    def environment(port: int) -> dict[str, str]:
        _, grpc_environment = serve_command(["--grpc", "service:svc"], {**os.environ, **SERVICE_GRPC.environment(port)})
        del grpc_environment[TRITON_METRICS_PORT_VARIABLE]  # no Triton of its own, and no /metrics here
        return grpc_environment

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "benchmarks.front_pair", "--grpc-workers", str(port), triton]

    return Server("service-grpc over the service's tritonserver", command, "", environment, grpc=True)


def run_grpc_workers(port: int, triton: str) -> int:
    """Start the gRPC API workers as `bentoml serve-grpc` does (one port, SO_REUSEPORT) and wait for them."""
    settings = Settings.from_environment(os.environ)
    worker = [sys.executable, "-m", "bentoml_cli.worker.grpc_api_server", "service:svc", "--host", settings.host,
              "--port", str(port), "--runner-map", json.dumps({"triton": triton}), "--working-dir", str(ROOT),
              "--enable-reflection"]  # fmt: skip
    count = settings.api_workers or os.cpu_count() or 1
    workers = [subprocess.Popen([*worker, "--worker-id", str(index + 1)]) for index in range(count)]
    return max(process.wait() for process in workers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", type=int, default=150, help="proteins of each length, each to every client")
    parser.add_argument("--residues", type=int, nargs="+", default=[28, 270], help="protein lengths probed")
    parser.add_argument("--users", type=int, nargs="+", default=[2, 8, 16], help="users on each front at once")
    parser.add_argument("--seconds", type=float, default=20, help="measured seconds per users' count")
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--grpc-workers", nargs=2, metavar=("PORT", "TRITON"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.grpc_workers:
        port, triton = args.grpc_workers
        return run_grpc_workers(int(port), triton)

    http, direct = (next(c for c in CONTENDERS if c.name == name) for name in ("service", "direct-triton"))
    grpc_contender = next(c for c in CONTENDERS if c.server is SERVICE_GRPC)
    with servers_up([http, direct], "with the gRPC workers over its tritonserver") as (running, clients):
        triton = tritonserver_url(running[SERVICE])
        workers = start(grpc_workers_over(triton_address(triton)))
        grpc = dataclasses.replace(grpc_contender, server=workers.server, triton_url=lambda _: triton)
        clients[grpc.name] = grpc.client(grpc.url(workers))  # closed with the others on the way out
        try:
            warm_up({grpc.name: clients[grpc.name]})
            print(f"{machine_facts()['cpu']}\n")
            print(f"One protein at a time, {args.probe} of each length, to each in turn (paired medians, ms):\n")
            print("| residues | gRPC − HTTP | HTTP − direct Triton | gRPC − direct Triton | largest |answer − torch| |")
            print("|---:|---:|---:|---:|---:|")
            pairs = [(grpc.name, http.name), (http.name, direct.name), (grpc.name, direct.name)]
            print("\n".join(paired_rows(clients, pairs, args.residues, args.probe)))
            print("\nBoth fronts driven at once, the users' count on each (seq/s):\n")
            print("| users on each | HTTP | gRPC | gRPC / HTTP |")
            print("|---:|---:|---:|---:|")
            shape = EncoderShape.from_checkpoint()
            fronts = [(http, running[SERVICE]), (grpc, workers)]
            for users in args.users:
                with ThreadPoolExecutor(len(fronts)) as pool:
                    points = list(pool.map(lambda front: run_point(*front, users, args.seconds, args.warmup, shape),
                                           fronts))  # fmt: skip
                rates = [point.rate(point.sequences) for point in points]
                print(f"| {users} | {rates[0]:.2f} | {rates[1]:.2f} | {rates[1] / rates[0]:.3f}x |")
        finally:
            stop(workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
