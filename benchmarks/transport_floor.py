"""What the gRPC front's transport costs against HTTP's before any service code runs: trivial servers, paired calls.

Two servers that do nothing but answer: grpcio's asyncio server (as BentoML's `serve-grpc` runs it: uvloop, the
GRPC_EXPERIMENTS `serving.startup.launch --grpc` sets) answering `grpc.health.v1.Health/Check`, and uvicorn with uvloop and
httptools (as BentoML's HTTP workers run) answering any POST with a small JSON body. The clients are the bench's
(`benchmarks/clients.py`): a grpcio channel of its own, and geventhttpclient. Each round trip goes to both in
turn, in rotating order; the report gives each one's p50, the median of the paired differences and the client's CPU
per call. Whatever the gRPC front spends over HTTP beyond this difference is the service's (BentoML's servicer and
interceptors, this service's code); this much no service code can take back.

    python -m benchmarks.transport_floor --calls 3000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import grpc
from geventhttpclient import HTTPClient
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from benchmarks.processes import Server, start, stop
from benchmarks.report import machine_facts
from serving.startup.launch import GRPC_EXPERIMENTS_VARIABLE, GRPC_SERVER_EXPERIMENTS

ANSWER = b'{"status":"SERVING"}'


def serve_grpc(port: int) -> None:
    import uvloop

    async def serve() -> None:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    uvloop.run(serve())


def serve_http(port: int) -> None:
    import uvicorn

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]  # the least ASGI app there is
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": ANSWER})

    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning",
                access_log=False)  # fmt: skip


def trivial_server(kind: str) -> Server:
    command = lambda port: [sys.executable, "-m", "benchmarks.transport_floor", "--serve", kind, str(port)]  # noqa: E731
    environment = lambda port: {GRPC_EXPERIMENTS_VARIABLE: GRPC_SERVER_EXPERIMENTS} if kind == "grpc" else {}  # noqa: E731
    return Server(f"trivial-{kind}", command, "/", environment, grpc=kind == "grpc")


def round_trips(calls: dict[str, Callable[[], object]], count: int) -> dict[str, tuple[list[float], float]]:
    """Each call `count` times, all of them in turn in rotating order: their latencies (s) and CPU per call (s)."""
    latencies: dict[str, list[float]] = {name: [] for name in calls}
    cpu = dict.fromkeys(calls, 0.0)
    names = list(calls)
    for index in range(count):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            cpu_start, started = time.process_time(), time.perf_counter()
            calls[name]()
            latencies[name].append(time.perf_counter() - started)
            cpu[name] += time.process_time() - cpu_start
    return {name: (latencies[name], cpu[name] / count) for name in calls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="round trips to each server")
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        kind, port = args.serve
        (serve_grpc if kind == "grpc" else serve_http)(int(port))
        return 0

    servers = [start(trivial_server("grpc")), start(trivial_server("http"))]
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{servers[0].port}")
        check = health_pb2_grpc.HealthStub(channel).Check
        http = HTTPClient("127.0.0.1", servers[1].port, concurrency=1)
        calls: dict[str, Callable[[], object]] = {
            "gRPC (grpcio asyncio server)": lambda: check(health_pb2.HealthCheckRequest(), timeout=10),
            "HTTP (uvicorn)": lambda: http.post("/", body=b"{}", headers={"content-type": "application/json"}).read(),
        }
        round_trips(calls, 100)  # connections made, code paths warm
        measured = round_trips(calls, args.calls)
        channel.close()
        http.close()
    finally:
        for running in servers:
            stop(running)
    (grpc_name, (grpc_latencies, _)), (http_name, (http_latencies, _)) = measured.items()
    paired = statistics.median(a - b for a, b in zip(grpc_latencies, http_latencies))
    print(f"{machine_facts()['cpu']}; {args.calls} round trips to each, in turn\n")
    print("| server | p50 ms | client CPU per call, ms |\n|---|---:|---:|")
    for name, (latencies, cpu) in measured.items():
        print(f"| {name} | {statistics.median(latencies) * 1e3:.3f} | {cpu * 1e3:.3f} |")
    print(f"\n{grpc_name} − {http_name}, median of paired round trips: {paired * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
