"""tritonserver provisioning is idempotent, and every readiness wait ends with a clear message."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tritonserver_setup.provision import provision
from tritonserver_setup.readiness import ReadinessTimeout, free_loopback_port, wait_until_ready


def test_provision_is_idempotent() -> None:
    first_path, first_origin = provision()
    first = first_path.read_bytes()
    second_path, second_origin = provision()
    assert (second_path, second_origin) == (first_path, first_origin)
    assert second_path.read_bytes() == first
    usage = subprocess.run([str(second_path), "--help"], capture_output=True, timeout=60)
    assert b"Usage: tritonserver" in usage.stderr


def test_wait_times_out_with_a_hint() -> None:
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(ReadinessTimeout, match="not ready after 1 s.*stub"):
            wait_until_ready(f"http://127.0.0.1:{free_loopback_port()}/v2/health/ready", silent, 1, "tritonserver")
    finally:
        silent.kill()
        silent.wait()


def test_wait_reports_an_early_exit() -> None:
    failing = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(ReadinessTimeout, match="exited with status 3"):
        wait_until_ready(f"http://127.0.0.1:{free_loopback_port()}/", failing, 30, "tritonserver")
