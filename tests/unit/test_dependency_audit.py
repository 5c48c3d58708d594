"""`make audit` (operations/tools/dependency_audit.py) with the real pip-audit, against an OSV stand-in on a loopback port."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from operations.container.image import STAND_IN_LOCK
from bionemo_serving.startup.target_runtime import CPU_BUILD, GPU_BUILD
from operations.tools.dependency_audit import TARGET_LOCKS
from bionemo_serving.startup.readiness import free_loopback_port

ROOT = Path(__file__).resolve().parents[2]
CPU_LOCK, GPU_LOCK, STAND_IN = ROOT / CPU_BUILD.lock, ROOT / GPU_BUILD.lock, ROOT / STAND_IN_LOCK


def locked_pins(lock: Path) -> dict[str, str]:
    return {canonicalize_name(name): version for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$",
                                                                             lock.read_text(), re.MULTILINE)}  # fmt: skip


def advisory(osv_id: str, alias: str, name: str, fixed: str) -> dict:
    """An OSV record as api.osv.dev returns it (schema 1.x), trimmed to the fields pip-audit reads and a few more."""
    return {
        "schema_version": "1.6.0",
        "id": osv_id,
        "aliases": [alias],
        "summary": "a test advisory",
        "modified": "2026-01-01T00:00:00Z",
        "published": "2026-01-01T00:00:00Z",
        "affected": [{
            "package": {"ecosystem": "PyPI", "name": name},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fixed}]}],
        }],
    }  # fmt: skip


class OsvStandIn(HTTPServer):
    """Answers `POST /v1/query` as the OSV API does: `{"vulns": [...]}` for an affected (name, version), else `{}`.

    Records every query; after `answers` of them it drops the connection without answering (a network that fails
    once the audit is under way). One request at a time, as pip-audit sends them.
    """

    def __init__(self, advisories: dict[tuple[str, str], list[dict]], answers: int | None) -> None:
        super().__init__(("127.0.0.1", 0), OsvHandler)
        self.advisories = advisories
        self.answers_left = answers
        self.queries: list[tuple[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/query"


class OsvHandler(BaseHTTPRequestHandler):
    server: OsvStandIn

    def do_POST(self) -> None:
        query = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/query" or query["package"]["ecosystem"] != "PyPI":
            self.send_error(400)
            return
        package = (query["package"]["name"], query["version"])
        self.server.queries.append(package)
        if self.server.answers_left == 0:
            return  # the connection closes with no answer
        if self.server.answers_left is not None:
            self.server.answers_left -= 1
        vulns = self.server.advisories.get(package)
        body = json.dumps({"vulns": vulns} if vulns else {}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: pytest shows the audit's own output on a failure."""


@contextmanager
def osv_stand_in(
    advisories: dict[tuple[str, str], list[dict]] | None = None, answers: int | None = None
) -> Iterator[OsvStandIn]:
    server = OsvStandIn(advisories or {}, answers)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def run_audit(*arguments: str, required: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -m operations.tools.dependency_audit`, as `make audit` runs it; AUDIT_REQUIRED only where a test sets it."""
    env = {key: value for key, value in os.environ.items() if key != "AUDIT_REQUIRED"}
    if required:
        env["AUDIT_REQUIRED"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "operations.tools.dependency_audit", *arguments], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip


def test_make_audit_audits_the_lock_of_every_target() -> None:
    """The targets' locks, and the one images on the stand-in base install (operations/container/image.py)."""
    assert TARGET_LOCKS == [STAND_IN, CPU_LOCK, GPU_LOCK]


def test_an_advisory_for_a_pin_of_one_lock_fails_the_audit_in_that_lock() -> None:
    """onnxruntime-gpu is pinned in the gpu lock only: the cpu lock passes, the gpu lock fails, the audit fails."""
    version = locked_pins(GPU_LOCK)["onnxruntime-gpu"]
    record = advisory("GHSA-test-ortg-0001", "CVE-2099-0001", "onnxruntime-gpu", fixed="99.0")
    with osv_stand_in({("onnxruntime-gpu", version): [record]}) as osv:
        audit = run_audit("--osv-url", osv.url)
    assert audit.returncode == 1, audit.stdout + audit.stderr
    stand_in_verdict, cpu_verdict, finding, gpu_verdict = audit.stdout.splitlines()
    assert stand_in_verdict.startswith(f"dependency audit: no known vulnerabilities in {len(locked_pins(STAND_IN))} ")
    assert cpu_verdict.startswith(f"dependency audit: no known vulnerabilities in {len(locked_pins(CPU_LOCK))} ")
    assert finding.startswith(f"onnxruntime-gpu {version}: ")
    assert "GHSA-test-ortg-0001" in finding and "CVE-2099-0001" in finding and "(99.0)" in finding
    assert "known vulnerabilities: 1, pins not audited: 0" in gpu_verdict
    assert gpu_verdict.endswith(f"in {GPU_LOCK}, OSV at {osv.url}")


def test_no_advisories_passes_and_counts_every_pin_of_every_lock() -> None:
    with osv_stand_in() as osv:
        audit = run_audit("--osv-url", osv.url)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert audit.stdout.splitlines() == [
        f"dependency audit: no known vulnerabilities in {len(locked_pins(lock))} packages of {lock} (pip-audit against "
        f"{osv.url})"
        for lock in (STAND_IN, CPU_LOCK, GPU_LOCK)
    ]
    assert set(osv.queries) == {pin for lock in (STAND_IN, CPU_LOCK, GPU_LOCK) for pin in locked_pins(lock).items()}


@pytest.mark.parametrize(
    ("arguments", "required", "exit_code"),
    [((), False, 0), (("--required",), False, 1), ((), True, 1)],
    ids=["optional", "--required", "AUDIT_REQUIRED=1"],
)
def test_an_unreachable_service_is_reported_as_not_run(arguments: tuple[str, ...], required: bool,
                                                       exit_code: int) -> None:  # fmt: skip
    closed = f"http://127.0.0.1:{free_loopback_port()}/v1/query"
    audit = run_audit("--osv-url", closed, *arguments, required=required)
    assert audit.returncode == exit_code, audit.stdout + audit.stderr
    assert audit.stdout.startswith(f"dependency audit NOT RUN: {closed} unreachable (")
    assert "Connection refused" in audit.stdout and "vulnerabilities" not in audit.stdout


@pytest.mark.parametrize(
    ("answers", "queries", "error"),
    [(0, 1, "('Connection aborted.'"), (1, 2, "requests.exceptions.ConnectionError: ('Connection aborted.'")],
    ids=["probe-unanswered", "pip-audit-unanswered"],
)
def test_a_service_that_stops_answering_is_not_run(answers: int, queries: int, error: str) -> None:
    """The probe alone settles it when the first query goes unanswered; pip-audit's own failure counts the same."""
    with osv_stand_in(answers=answers) as osv:
        audit = run_audit("--osv-url", osv.url)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert len(osv.queries) == queries
    assert audit.stdout.startswith(f"dependency audit NOT RUN: {osv.url} unreachable ({error}")


def test_a_pin_pip_audit_leaves_out_fails_the_audit(tmp_path: Path) -> None:
    """pip-audit drops a pin whose marker is false for the Python running it, and says nothing."""
    lock = tmp_path / "requirements.lock"
    lock.write_text("pydantic==2.14.3\n    # via bionemo-serving\nidna==3.10 ; python_version < '3'\n")
    with osv_stand_in() as osv:
        audit = run_audit("--osv-url", osv.url, "--lock", str(lock))
    assert audit.returncode == 1, audit.stdout + audit.stderr
    assert "not audited: idna 3.10" in audit.stdout and "known vulnerabilities: 0, pins not audited: 1" in audit.stdout
