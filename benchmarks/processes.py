"""Start a contender's server on a free loopback port in its own session, wait for it (bounded), stop it by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bionemo_serving.startup.readiness import ReadinessTimeout, free_loopback_port, wait_until_ready, wait_until_serving

ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 180
STOP_GRACE_S = 30


@dataclass(frozen=True)
class Server:
    """How one contender's server process starts on a port, and the path that answers 200 once it serves."""

    name: str
    command: Callable[[int], list[str]]
    ready_path: str
    environment: Callable[[int], Mapping[str, str]] = lambda port: {}
    cwd: Path = ROOT
    """The checkout it runs from (another one's code, for a side-by-side comparison)."""
    grpc: bool = False
    """A gRPC server: ready when its health service answers SERVING (`ready_path` unused)."""


@dataclass
class Running:
    server: Server
    port: int
    process: subprocess.Popen
    log_path: Path
    descendants: list[psutil.Process] = field(default_factory=list)
    """Everything it had started once ready (tritonserver, workers): some leave its process group."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, characters: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:]


class ServerFailed(RuntimeError):
    """A server did not become ready; the message holds the tail of its log."""


def start(server: Server, timeout: float = STARTUP_TIMEOUT_S) -> Running:
    port = free_loopback_port()
    # This environment's bin first: bentoml finds tritonserver there (tritonserver_setup's wrapper).
    environment = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    environment.update(server.environment(port))
    log_path = Path(tempfile.mkstemp(prefix=f"bench-{server.name}-", suffix=".log")[1])
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            server.command(port),
            cwd=server.cwd,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = Running(server, port, process, log_path)
    try:
        if server.grpc:
            wait_until_serving(f"127.0.0.1:{port}", process, timeout, server.name)
        else:
            wait_until_ready(f"{running.url}{server.ready_path}", process, timeout, server.name)
    except ReadinessTimeout as error:
        message = f"{error}\n--- {server.name} log (tail) ---\n{running.log_tail()}"
        stop(running)
        raise ServerFailed(message) from None
    running.descendants.extend(psutil.Process(process.pid).children(recursive=True))
    return running


def terminate(processes: list[psutil.Process], grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM each of `processes`, by PID, then SIGKILL those still running `grace_s` later; their PIDs."""
    for process in processes:
        try:
            process.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    return [process.pid for process in processes]


def stop(running: Running) -> None:
    """SIGTERM its process group and let it shut its children down; then SIGKILL what is left, by PID."""
    for sent, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):  # the second only if still running
        try:
            os.killpg(running.process.pid, sent)
            running.process.wait(timeout=wait)
            break
        except ProcessLookupError:
            break
        except subprocess.TimeoutExpired:
            continue
    _, alive = psutil.wait_procs(running.descendants, timeout=STOP_GRACE_S)
    for survivor in alive:
        survivor.kill()
    psutil.wait_procs(alive, timeout=STOP_GRACE_S)
    running.log_path.unlink(missing_ok=True)
