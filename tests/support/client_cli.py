"""`bionemo-client` as a user runs it: from its own environment (.venv-client, which `make test-client` creates),
against a running service."""

from __future__ import annotations

import subprocess

from support.paths import CLIENT_VENV
from support.service import RunningService


def cli(service: RunningService, *args: str) -> list[str]:
    """The command line of `bionemo-client ARGS --url` the service's."""
    executable = CLIENT_VENV / "bin" / "bionemo-client"
    assert executable.is_file(), f"{executable} is missing: `make test-client` creates the client's environment"
    return [str(executable), *args, "--url", service.url]


def run(service: RunningService, *args: str, status: int = 0) -> subprocess.CompletedProcess:
    """The CLI to its end; `status`: its exit status expected (3: done, records refused)."""
    done = subprocess.run(cli(service, *args), capture_output=True, text=True, timeout=600)
    assert done.returncode == status, done.stderr
    return done
