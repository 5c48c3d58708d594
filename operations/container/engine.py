"""The container engine this machine builds and runs images with, its settings, and `make test`'s provisioning of it.

    .venv/bin/python -m operations.container.engine --provision

docker counts where its daemon answers; podman and buildah read operations/container/containers.conf (CONTAINERS_CONF). The
image's tests run containers, so they need docker or podman, and the stand-in base needs debootstrap (as root).
`--provision` installs what is missing with apt where this process is root, and otherwise fails naming it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from operations.tools import apt

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = ROOT / "operations" / "container" / "containers.conf"
ENGINES = ("docker", "podman", "buildah")
"""In the order `make image` prefers them; buildah builds but cannot run a container."""
APT_PACKAGES = ("podman", "buildah", "runc", "catatonit", "debootstrap")
"""What `--provision` installs with apt: podman runs containers with runc (containers.conf) and `--init` with
catatonit, debootstrap builds the stand-in's Debian base."""


class EngineError(RuntimeError):
    """No engine here can do what is asked; the message says what to install."""


def engine_environment() -> dict[str, str]:
    """This process's environment with podman's and buildah's settings for these hosts (operations/container/containers.conf),
    unless the caller set its own."""
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(CONTAINERS_CONF))}


def _usable(name: str) -> bool:
    if shutil.which(name) is None:
        return False
    if name != "docker":
        return True
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60, check=False).returncode == 0


def engine(runs_containers: bool = False) -> str:
    """The first of ENGINES usable here (a docker client without a daemon does not count); with `runs_containers`,
    docker or podman only."""
    candidates = [name for name in ENGINES if not (runs_containers and name == "buildah")]
    for name in candidates:
        if _usable(name):
            return name
    raise EngineError(
        f"no container engine that can {'run' if runs_containers else 'build'} images: install "
        f"{', '.join(candidates[:-1])} or {candidates[-1]} (docker's daemon running; as root on Debian or Ubuntu: "
        f"apt-get install {' '.join(APT_PACKAGES)})"
    )


def run(command: Sequence[str], **options: object) -> None:
    """`command` echoed, then run with the engine's settings; CalledProcessError if it fails."""
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, env=engine_environment(), **options)  # type: ignore[call-overload]


def image_exists(builder: str, image: str) -> bool:
    inspect = (
        ["buildah", "inspect", "--type", "image", image]
        if builder == "buildah"
        else [builder, "image", "inspect", image]
    )
    return subprocess.run(inspect, capture_output=True, env=engine_environment(), check=False).returncode == 0


def missing_tools() -> list[str]:
    """What the image's tests need and this machine lacks: an engine that runs containers, and debootstrap."""
    missing = []
    if not (_usable("docker") or (_usable("podman") and shutil.which("runc") and shutil.which("catatonit"))):
        missing.append("podman (with runc and catatonit) or docker with its daemon running")
    if shutil.which("debootstrap") is None:
        missing.append("debootstrap")
    return missing


def provision() -> None:
    """Install what `missing_tools` names with apt, as root; elsewhere an EngineError naming it."""
    missing = missing_tools()
    if not missing:
        return
    if not apt.can_install():
        raise EngineError(
            f"the image's tests need {'; '.join(missing)}: install them (Debian or Ubuntu, as root: "
            f"apt-get install {' '.join(APT_PACKAGES)})"
        )
    apt.install(APT_PACKAGES)
    still = missing_tools()
    if still:
        raise EngineError(f"apt-get installed {' '.join(APT_PACKAGES)}, and still missing: {'; '.join(still)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provision", action="store_true", help="install what the image's tests need (root, apt)")
    args = parser.parse_args(argv)
    try:
        if args.provision:
            provision()
        print(f"container engine: {engine(runs_containers=args.provision)}")
    except (EngineError, subprocess.CalledProcessError) as error:
        print(f"container engine: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
