"""Debian packages installed with apt-get, as root: what `make test` provisions where a tool it needs is missing (the
container engine, operations/container/engine.py; Java for Spark, operations/tools/java_runtime.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence


def can_install() -> bool:
    """Root, on a machine with apt-get: elsewhere the caller names the packages for someone who can."""
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def install(packages: Sequence[str], recommends: bool = True) -> None:
    """`apt-get update`, then `apt-get install` of `packages`, without questions; CalledProcessError on a failure."""
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=environment)
    options = [] if recommends else ["--no-install-recommends"]
    subprocess.run(["apt-get", "install", "-y", "-qq", *options, *packages], check=True, env=environment)
