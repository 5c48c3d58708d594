"""Contender 1: this service, started as everywhere else (`python -m bionemo_serving.startup.launch service:svc`, production mode);
and its gRPC front (`python -m bionemo_serving.startup.launch --grpc service:svc`).

Its tritonserver (started by the BentoML Triton runner, on a free loopback
port) is also contender 2's: the direct-Triton client calls the very same
server, models and config, so the only difference is the front.
"""

from __future__ import annotations

import sys

from benchmarks.processes import ROOT, Running, Server
from bionemo_serving.startup.readiness import free_loopback_port

SERVICE = Server(
    name="service",
    command=lambda port: [sys.executable, "-m", "bionemo_serving.startup.launch", "service:svc"],
    ready_path="/readyz",
    environment=lambda port: {
        "BIONEMO_HOST": "127.0.0.1",
        "BIONEMO_PORT": str(port),
        "BIONEMO_MODEL_REPOSITORY": str(ROOT / "model_repository"),
    },
)


SERVICE_GRPC = Server(
    name="service-grpc",
    command=lambda port: [sys.executable, "-m", "bionemo_serving.startup.launch", "--grpc", "service:svc"],
    ready_path="",
    environment=lambda port: {
        "BIONEMO_HOST": "127.0.0.1",
        "BIONEMO_PORT": str(port),
        "BIONEMO_GRPC_METRICS_PORT": str(free_loopback_port()),
        "BIONEMO_MODEL_REPOSITORY": str(ROOT / "model_repository"),
    },
    grpc=True,
)


def tritonserver_url(running: Running) -> str:
    """The HTTP address of the tritonserver the service's runner started (from its command line)."""
    for process in running.descendants:
        arguments = process.cmdline()
        if arguments and arguments[0].endswith("tritonserver"):
            port = next(a.split("=", 1)[1] for a in arguments if a.startswith("--http-port="))
            return f"http://127.0.0.1:{port}"
    raise LookupError(f"no tritonserver among the service's processes:\n{running.log_tail()}")
