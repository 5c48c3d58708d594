"""Bounded waits for a started server: a hung load must end in a clear error, never a silent hang."""

from __future__ import annotations

import random
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


class ReadinessTimeout(RuntimeError):
    """A server did not become ready in time, or exited while starting."""


EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_CHOSEN_PORT = 10000
"""Below it lie the ports other servers are commonly set to (3000, Triton's 8000-8002)."""


def free_loopback_port(attempts: int = 100) -> int:
    """A loopback port free now, for a server that binds it later: drawn below the kernel's ephemeral range.

    A port from that range (what binding port 0 gives) may be taken before the server binds it by any outgoing
    connection, whose local port the kernel draws from the same range: a tritonserver started by `make test` exited
    with "failed to start Metrics service: Socket '127.0.0.1:51951' already in use". Where the range leaves no room
    below it, the kernel's own pick is the fallback.
    """
    try:
        ephemeral_low = int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768  # Linux's default range starts there
    for _ in range(attempts if ephemeral_low > LOWEST_CHOSEN_PORT else 0):
        port = random.randrange(LOWEST_CHOSEN_PORT, ephemeral_low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # in use, or held in TIME_WAIT by an earlier server's connections
                continue
            return port
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
        "python-backend model, its python backend stub does not match this Python: run "
        "`python -m operations.tritonserver_setup`."
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
