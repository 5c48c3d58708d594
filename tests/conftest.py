"""Fixtures that start the real stack: `bentoml serve` with the real tritonserver behind it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from model_catalog import MODELS
from reference import CHECKPOINTS
from tritonserver_setup.readiness import ReadinessTimeout, free_loopback_port, wait_until_ready

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REPOSITORY = ROOT / "model_repository"
STARTUP_TIMEOUT_S = 180


@dataclass(frozen=True)
class RunningService:
    url: str
    process: subprocess.Popen
    log_path: Path

    def log_tail(self, characters: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:]


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


@pytest.fixture(scope="session")
def service() -> Iterator[RunningService]:
    """`bentoml serve service:svc --production` on a free loopback port; stopped by its PID afterwards."""
    missing = [name for name in MODELS if not (CHECKPOINTS / name / "config.json").is_file()]
    if missing:
        pytest.fail(f"default checkpoints missing for {missing}: run `make models` (make test does) first")
    port = free_loopback_port()
    env = dict(os.environ, PATH=f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env["BIONEMO_MODEL_REPOSITORY"] = str(DEFAULT_REPOSITORY)
    log_path = Path(tempfile.mkstemp(prefix="bentoml-serve-", suffix=".log")[1])
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "bentoml", "serve", "service:svc", "--production",
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    running = RunningService(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_until_ready(f"{running.url}/readyz", process, STARTUP_TIMEOUT_S, "bentoml serve")
    except ReadinessTimeout as error:
        stop_process_group(process)
        pytest.fail(f"{error}\n--- log ---\n{running.log_tail()}")
    children = psutil.Process(process.pid).children(recursive=True)  # tritonserver among them
    assert any("tritonserver" in " ".join(child.cmdline()) for child in children), running.log_tail()
    yield running
    stop_process_group(process)
    survivors = [child.pid for child in children if child.is_running()]
    assert not survivors, f"still running after stop: {survivors}"
    log_path.unlink(missing_ok=True)
