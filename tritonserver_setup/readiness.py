"""Bounded waits for a started server: a hung load must end in a clear error, never a silent hang."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request


class ReadinessTimeout(RuntimeError):
    """A server did not become ready in time, or exited while starting."""


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_ready(url: str, process: subprocess.Popen, timeout: float, what: str) -> float:
    """Poll `url` until it answers 200; raise `ReadinessTimeout` if `process` exits or `timeout` passes."""
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < timeout:
        if process.poll() is not None:
            raise ReadinessTimeout(f"{what} exited with status {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return elapsed
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    raise ReadinessTimeout(
        f"{what} was not ready after {timeout:.0f} s ({url}). If tritonserver hangs while loading a "
        "python-backend model, its python backend stub does not match this Python: run `python -m tritonserver_setup`."
    )


def wait_until_serving(address: str, process: subprocess.Popen, timeout: float, what: str) -> float:
    """Ask the gRPC health service at `address` (host:port) until it answers SERVING; raise `ReadinessTimeout` if
    `process` exits or `timeout` passes. BentoML's serve-grpc answers SERVING once its runners (Triton) are ready."""
    import grpc  # only gRPC servers need it
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    started = time.monotonic()
    with grpc.insecure_channel(address) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        while (elapsed := time.monotonic() - started) < timeout:
            if process.poll() is not None:
                raise ReadinessTimeout(f"{what} exited with status {process.returncode} before it was ready")
            try:
                if check(health_pb2.HealthCheckRequest(), timeout=2).status == health_pb2.HealthCheckResponse.SERVING:
                    return elapsed
            except grpc.RpcError:
                pass
            time.sleep(0.25)
    raise ReadinessTimeout(f"{what} not SERVING at {address} within {timeout:.0f} s")
