"""The real stack as the tests run it: `bentoml serve` (or `serve-grpc`) with the real tritonserver behind it, started
through the launcher in a process group of its own, called over HTTP, and stopped with nothing of it left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
import tritonclient.http

from bionemo_serving.model_catalog import MODELS
from support.paths import CHECKPOINTS, DEFAULT_REPOSITORY, ROOT
from bionemo_serving.startup.readiness import ReadinessTimeout, free_loopback_port, wait_until_ready, wait_until_serving

STARTUP_TIMEOUT_S = 180


@dataclass(frozen=True)
class RunningService:
    """A service a test started: where it answers, the process group to stop, its log, and a client's calls."""

    url: str
    """http://127.0.0.1:PORT, or 127.0.0.1:PORT for `serve-grpc`."""
    process: subprocess.Popen
    log_path: Path
    children: list[psutil.Process] = field(default_factory=list)

    def log_tail(self, characters: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:]

    def post(
        self, path: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = 300
    ) -> requests.Response:
        """POST `body` as JSON; a `str` body is sent as it is, as JSON's content type (a body that is not JSON)."""
        if isinstance(body, str):
            headers = {"content-type": "application/json", **(headers or {})}
            return requests.post(f"{self.url}{path}", data=body, headers=headers, timeout=timeout)
        return requests.post(f"{self.url}{path}", json=body, headers=headers, timeout=timeout)

    def answer(self, path: str, body: Any) -> dict[str, Any]:
        """The JSON answer of a POST that must succeed."""
        response = self.post(path, body)
        assert response.status_code == 200, response.text
        return response.json()

    def served_models(self) -> list[dict[str, Any]]:
        """GET /models' entries."""
        response = requests.get(f"{self.url}/models", timeout=30)
        assert response.status_code == 200, response.text
        return response.json()["models"]

    def triton_argument(self, option: str) -> str:
        """The value of one `--option=value` argument of the tritonserver the service started."""
        commands = map(_command_line, self.children)
        (command,) = [command for command in commands if Path(command[0]).name == "tritonserver"]
        (value,) = [argument.split("=", 1)[1] for argument in command if argument.startswith(f"--{option}=")]
        return value

    @property
    def triton_url(self) -> str:
        """host:port of the HTTP endpoint of the tritonserver the service started (the runner picks the port)."""
        return f"127.0.0.1:{self.triton_argument('http-port')}"

    @property
    def served_repository(self) -> Path:
        """The folder tritonserver serves: the launcher's own for this start (bionemo_serving/runtimes/served_repository.py)."""
        return Path(self.triton_argument("model-repository"))

    def triton_counts(self, model: str) -> tuple[int, int]:
        """Triton's (inference_count, execution_count) of `model` so far: rows answered and model runs."""
        statistics = tritonclient.http.InferenceServerClient(self.triton_url).get_inference_statistics(model)
        (entry,) = statistics["model_stats"]
        return entry["inference_count"], entry["execution_count"]

    def tritonserver(self) -> psutil.Process:
        """The tritonserver running now (a killed one is restarted by the runner: another process)."""
        (process,) = [
            child
            for child in psutil.Process(self.process.pid).children(recursive=True)
            if Path(child.cmdline()[0]).name == "tritonserver"
        ]
        return process


def _command_line(process: psutil.Process) -> list[str]:
    """The process's arguments; [""] for one that has ended (a model's stub, say)."""
    try:
        return process.cmdline() or [""]
    except psutil.NoSuchProcess:
        return [""]


def stop_process_group(process: subprocess.Popen, grace_s: float = 45) -> None:
    """SIGTERM the group `process` leads, then SIGKILL whatever is left after `grace_s`."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def triton_processes() -> set[int]:
    """What `ps -ef | grep triton` lists: tritonserver, its wrapper and the python-backend stubs."""
    found = set()
    for process in psutil.process_iter(["pid", "name", "cmdline"]):
        if "triton" in f"{process.info['name']} {' '.join(process.info['cmdline'] or [])}":
            found.add(process.info["pid"])
    return found - {os.getpid()}


def start_service(
    command: list[str], cwd: Path, environment: dict[str, str], grpc: bool = False, ready: bool = True
) -> RunningService:
    """Start `command` (a launcher of `bentoml serve`, or of `serve-grpc` with `grpc`) in its own process group;
    wait for /readyz (gRPC: the health service's SERVING), or with `ready` False for /livez alone (HTTP: a service
    that is not to become ready).

    `environment` adds to this process's; the port (and the gRPC metrics port) is a free loopback port.
    """
    port = free_loopback_port()
    env = dict(os.environ, PATH=f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env.update(environment, BIONEMO_HOST="127.0.0.1", BIONEMO_PORT=str(port))
    if grpc:
        env.setdefault("BIONEMO_GRPC_METRICS_PORT", str(free_loopback_port()))
    log_path = Path(tempfile.mkstemp(prefix="bentoml-serve-", suffix=".log")[1])
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    running = RunningService(f"127.0.0.1:{port}" if grpc else f"http://127.0.0.1:{port}", process, log_path)
    try:
        if grpc:
            wait_until_serving(running.url, process, STARTUP_TIMEOUT_S, "bentoml serve-grpc")
        else:
            probe = f"{running.url}/{'readyz' if ready else 'livez'}"
            wait_until_ready(probe, process, STARTUP_TIMEOUT_S, "bentoml serve")
    except ReadinessTimeout as error:
        stop_process_group(process)
        pytest.fail(f"{error}\n--- log ---\n{running.log_tail()}")
    children = psutil.Process(process.pid).children(recursive=True)  # tritonserver among them
    assert any("tritonserver" in " ".join(child.cmdline()) for child in children), running.log_tail()
    running.children.extend(children)
    return running


def stop_service(running: RunningService) -> None:
    """Stop what `start_service` started, by its PID, and check nothing it started is left."""
    stop_process_group(running.process)
    survivors = [child.pid for child in running.children if _still_running(child)]
    assert not survivors, f"still running after stop: {survivors}"
    running.log_path.unlink(missing_ok=True)


def _still_running(process: psutil.Process, settle_s: float = 10.0) -> bool:
    """Whether `process` runs `settle_s` after its group was killed: a process SIGKILLed a moment ago may not have
    exited yet, and one that has exited stays a zombie until its new parent reaps it; neither runs anything."""
    try:
        process.wait(timeout=settle_s)
    except psutil.TimeoutExpired:
        try:
            return process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    return False


def stop_with_requests_in_flight(
    url: str, body: dict[str, object], clients: int, stop: Callable[[], int], head_start_s: float
) -> tuple[list[int], int, float]:
    """`clients` POSTs of `body` to `url` at once, then after `head_start_s` `stop()`, which stops the server and
    returns its exit status: the answers' HTTP statuses, that exit status, and the seconds from the stop to the last
    answer."""
    answers: list[int] = []

    def post() -> None:
        answers.append(requests.post(url, json=body, timeout=300).status_code)

    threads = [threading.Thread(target=post) for _ in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(head_start_s)
    started = time.monotonic()
    status = stop()
    for thread in threads:
        thread.join()
    return answers, status, time.monotonic() - started


def start_launcher(environment: dict[str, str] | None = None, grpc: bool = False, ready: bool = True) -> RunningService:
    """`python -m bionemo_serving.startup.launch [--grpc] service:svc` (it becomes `bentoml serve` or `serve-grpc`) on the
    default models, with `environment`'s settings: the shared service, or one a test starts for itself (other limits,
    or to break it)."""
    missing = [name for name in MODELS if not (CHECKPOINTS / name / "config.json").is_file()]
    if missing:
        pytest.fail(f"default checkpoints missing for {missing}: run `make models` (make test does) first")
    return start_service(
        [sys.executable, "-m", "bionemo_serving.startup.launch", *(["--grpc"] if grpc else []), "service:svc"],
        ROOT,
        {"BIONEMO_MODEL_REPOSITORY": str(DEFAULT_REPOSITORY), **(environment or {})},
        grpc,
        ready,
    )
