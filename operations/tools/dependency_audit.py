"""`make audit`: the bentos' pinned packages against the OSV advisory database, with pip-audit.

    python -m operations.tools.dependency_audit [--osv-url URL] [--lock operations/container/requirements-cpu.lock]... [--required]

Audits every image's lock, `operations/container/requirements-*.lock` (the exact pins an image installs, the stand-in's too;
`--lock`, repeated, picks others), each as it is: `--no-deps --disable-pip`, since a lock is complete and nothing
needs resolving or installing. Exit 1 on a known vulnerability, printing `package version: advisory id (fix
versions)` for each before the verdict on its lock, or when a pin of a lock was not audited (pip-audit skips URL
pins, and drops pins whose environment marker is false for the Python running it, not the image's).

Where the advisory service cannot be reached (a closed network, a proxy that only serves the package index), the
audit prints `dependency audit NOT RUN: <url> unreachable (<error>)` and exits 0, so that `make test` stays usable
offline; with `--required` or `AUDIT_REQUIRED=1` it exits 1. One small query probes the service first, so a closed
network costs seconds instead of a timeout per package.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import requests
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
TARGET_LOCKS = sorted((ROOT / "operations" / "container").glob("requirements-*.lock"))
"""One per onnxruntime build (bionemo_serving/startup/target_runtime.py), as `make lock` writes them."""
DEFAULT_OSV_URL = "https://api.osv.dev/v1/query"
PROBE_TIMEOUT_S = 5
# `name==version` at the start of a line, before any marker or comment (as `uv pip compile` writes pins).
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;#\\]+)", re.MULTILINE)
# What pip-audit's stderr shows when the service did not answer: requests' exceptions end its traceback
# (pip-audit catches only a connect timeout, and says so in its own words).
SERVICE_FAILURES = re.compile(r"^requests\.exceptions\.\w+: .*$|Could not connect to OSV.*$", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    lines: list[str]
    reached: bool = True
    """False where the service did not answer: auditing another lock would not reach it either."""


def locked_pins(lock: Path) -> dict[str, Version]:
    """Every pin of the lock, read here rather than taken from pip-audit, to check that it audited them all."""
    return {canonicalize_name(name): Version(version) for name, version in PIN.findall(lock.read_text())}


def describe(error: requests.RequestException) -> str:
    """One line: urllib3's reason (name resolution, refused connection) without requests' retry wrapping."""
    reason = getattr(error.args[0], "reason", None) if error.args else None
    return str(reason or error)


def probe(osv_url: str, name: str, version: Version) -> str | None:
    """The error that kept one OSV query for `name` from being answered, or None when the service answered."""
    query = {"package": {"name": name, "ecosystem": "PyPI"}, "version": str(version)}
    try:
        response = requests.post(osv_url, json=query, timeout=PROBE_TIMEOUT_S)
        response.raise_for_status()
        response.json()
    except requests.RequestException as error:
        return describe(error)
    return None


def run_pip_audit(lock: Path, osv_url: str, timeout_s: int) -> subprocess.CompletedProcess[str]:
    """pip-audit's JSON on stdout; its own PyPI service would need PyPI's JSON API, which an index proxy lacks."""
    return subprocess.run(
        [sys.executable, "-m", "pip_audit", "-r", str(lock), "--no-deps", "--disable-pip", "-s", "osv",
         "--osv-url", osv_url, "-f", "json", "--aliases", "on", "--desc", "off", "--progress-spinner", "off",
         "--timeout", str(timeout_s)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def not_run(osv_url: str, error: str, required: bool) -> Outcome:
    """Said in so many words: an audit that did not happen must not read as one that found nothing."""
    return Outcome(1 if required else 0, [f"dependency audit NOT RUN: {osv_url} unreachable ({error})"], reached=False)


def finding(entry: dict, vulnerability: dict) -> str:
    """`package version: advisory ids (fix versions)`. All the ids: pip-audit makes a PYSEC or CVE alias the id, so
    the OSV record's own id (a GHSA) may be among the aliases."""
    advisories = ", ".join([vulnerability["id"], *sorted(vulnerability["aliases"])])
    fixes = ", ".join(vulnerability["fix_versions"]) or "no fix released"
    return f"{entry['name']} {entry['version']}: {advisories} ({fixes})"


def judge(report: dict, pins: dict[str, Version], lock: Path, osv_url: str) -> Outcome:
    """Vulnerabilities and unaudited pins from pip-audit's JSON: `{"dependencies": [{"name", "version", "vulns":
    [{"id", "fix_versions", "aliases"}]} or {"name", "skip_reason"}], "fixes": []}`."""
    dependencies = report["dependencies"]
    skipped = {entry["name"]: entry["skip_reason"] for entry in dependencies if "skip_reason" in entry}
    audited = {entry["name"]: Version(entry["version"]) for entry in dependencies if "skip_reason" not in entry}
    findings = [
        finding(entry, vulnerability) for entry in dependencies if "skip_reason" not in entry
        for vulnerability in entry["vulns"]
    ]  # fmt: skip
    not_audited = [f"not audited: {name} ({reason})" for name, reason in skipped.items()] + [
        f"not audited: {name} {version} (left out by pip-audit)"
        for name, version in pins.items() if audited.get(name) != version and name not in skipped
    ]  # fmt: skip
    if findings or not_audited:
        summary = f"known vulnerabilities: {len(findings)}, pins not audited: {len(not_audited)}"
        return Outcome(1, [*findings, *not_audited, f"dependency audit FAILED ({summary}) in {lock}, OSV at {osv_url}"])
    summary = f"no known vulnerabilities in {len(audited)} packages of {lock} (pip-audit against {osv_url})"
    return Outcome(0, [f"dependency audit: {summary}"])


def audit(lock: Path, osv_url: str, timeout_s: int, required: bool) -> Outcome:
    """Probe with the lock's first pin, then pip-audit; its connection failures count as the probe's would."""
    pins = locked_pins(lock)
    if not pins:
        return Outcome(1, [f"dependency audit FAILED: no `name==version` pins in {lock}"])
    first_name, first_version = next(iter(pins.items()))
    if (error := probe(osv_url, first_name, first_version)) is not None:
        return not_run(osv_url, error, required)
    result = run_pip_audit(lock, osv_url, timeout_s)
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        if failures := SERVICE_FAILURES.findall(result.stderr):
            return not_run(osv_url, failures[-1], required)
        return Outcome(1, [result.stderr.rstrip(), f"dependency audit FAILED: pip-audit exited {result.returncode}"])
    return judge(report, pins, lock, osv_url)


def audit_locks(locks: list[Path], osv_url: str, timeout_s: int, required: bool) -> Outcome:
    """Each lock in turn, its findings and verdict after the previous one's; the worst exit code. The first
    NOT RUN stands for all of them."""
    if not locks:
        return Outcome(
            1, ["dependency audit FAILED: no lock to audit (`make lock` writes them into operations/container/)"]
        )
    outcomes = []
    for lock in locks:
        outcome = audit(lock, osv_url, timeout_s, required)
        if not outcome.reached:
            return outcome
        outcomes.append(outcome)
    lines = [line for outcome in outcomes for line in outcome.lines]
    return Outcome(max(outcome.exit_code for outcome in outcomes), lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--osv-url", default=DEFAULT_OSV_URL, help="an OSV-compatible /v1/query endpoint (a mirror)")
    parser.add_argument(
        "--lock", type=Path, action="append",
        help="a requirements file of exact pins; repeatable (default: every operations/container/requirements-*.lock)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=int, default=15, help="seconds pip-audit waits for each answer")
    parser.add_argument(
        "--required", action="store_true", default=os.environ.get("AUDIT_REQUIRED") == "1",
        help="exit 1 when the service is unreachable (default: AUDIT_REQUIRED=1 in the environment)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    outcome = audit_locks(args.lock or TARGET_LOCKS, args.osv_url, args.timeout, args.required)
    print("\n".join(outcome.lines))
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
