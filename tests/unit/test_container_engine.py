"""`make test`'s provisioning of a container engine (operations/container/engine.py), where it cannot install one: a clear failure
naming what to install, never a silent skip of the image's tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT


def test_without_an_engine_or_apt_provisioning_fails_naming_what_to_install(tmp_path: Path) -> None:
    """A PATH with none of docker, podman, runc, catatonit, debootstrap or apt-get: as on a machine without them."""
    environment = {**os.environ, "PATH": str(tmp_path)}
    provision = subprocess.run(
        [sys.executable, "-m", "operations.container.engine", "--provision"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert provision.returncode == 1, provision.stdout + provision.stderr
    message = provision.stderr
    assert "the image's tests need podman (with runc and catatonit) or docker with its daemon running; debootstrap" in message
    assert "apt-get install podman buildah runc catatonit debootstrap" in message
