"""Start the provisioned tritonserver on a one-model repository and wait, bounded, until it is ready."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

from bionemo_serving.startup.readiness import ReadinessTimeout, free_loopback_port, wait_until_ready

_IDENTITY_CONFIG = """
name: "identity"
backend: "python"
max_batch_size: 0
input { name: "x" data_type: TYPE_FP32 dims: [ -1 ] }
output { name: "y" data_type: TYPE_FP32 dims: [ -1 ] }
instance_group { kind: KIND_CPU count: 1 }
"""

_IDENTITY_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
            for r in requests
        ]
"""


def check_loads_python_model(binary: Path, timeout: float) -> float:
    """Seconds tritonserver took to load a python-backend model; raises `ReadinessTimeout` past `timeout`."""
    with tempfile.TemporaryDirectory(prefix="tritonserver-check-") as repository:
        version = Path(repository) / "identity" / "1"
        version.mkdir(parents=True)
        (version.parent / "config.pbtxt").write_text(_IDENTITY_CONFIG)
        (version / "model.py").write_text(_IDENTITY_MODEL)
        port = free_loopback_port()
        process = subprocess.Popen(
            [
                str(binary),
                f"--model-repository={repository}",
                "--allow-grpc=false",
                "--allow-metrics=false",
                "--http-address=127.0.0.1",
                f"--http-port={port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            return wait_until_ready(f"http://127.0.0.1:{port}/v2/health/ready", process, timeout, "tritonserver")
        except ReadinessTimeout as error:
            os.killpg(process.pid, signal.SIGKILL)
            log = process.stderr.read().decode(errors="replace")[-2000:] if process.stderr else ""
            raise ReadinessTimeout(f"{error}\n--- tritonserver log (tail) ---\n{log}") from None
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
