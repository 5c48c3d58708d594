"""Install `<venv>/bin/tritonserver`: a wrapper around an installed server, or around PyTriton's."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

INSTALLED_SERVER = Path("/opt/tritonserver/bin/tritonserver")


class ProvisionError(RuntimeError):
    """No usable tritonserver could be set up; the message says what is missing."""


def venv_bin() -> Path:
    return Path(sys.prefix) / "bin"


def _installed_server(target: Path) -> Path | None:
    """A tritonserver installed outside the folder of `target`, if any (never the wrapper itself)."""
    own_folder = target.parent.resolve()
    search = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p).resolve() != own_folder)
    found = shutil.which("tritonserver", path=search)
    if found:
        return Path(found)
    return INSTALLED_SERVER if INSTALLED_SERVER.is_file() else None


TRITON_NICENESS = 5
"""tritonserver's and its stubs' niceness: they take the cores the API workers leave; a refusal past capacity, which
waits for a core behind the models' work otherwise, is answered at once."""


def _supervising_wrapper(about: str, environment: list[str], server: list[str]) -> str:
    """Bash script that runs `server "$@"` and, however the server ends, ends the python backend stubs with it
    and removes their shared-memory regions.

    One script for every tritonserver: the stubs (one process per model instance) ignore SIGTERM, so a server
    killed outright leaves them running, reparented to init, each holding its model's memory. Each stub's region
    in /dev/shm (1 MiB or more) is removed only by a stub that ends cleanly: those of a killed server would stay
    for the life of the host, or of a pod, whose /dev/shm outlives its container's restarts. The wrapper names
    the regions after itself (unless the options name a prefix of their own) so that it removes its own only.
    """
    environment_lines = "".join(f"{line}\n" for line in environment)
    return f"""#!/usr/bin/env bash
# Written by `python -m operations.tritonserver_setup`: {about}.
{environment_lines}# tritonserver runs in a process group of its own (job control), so that the python backend stubs
# it starts end with it however it ends: the stubs of a killed server otherwise live on, each holding a model's memory.
set -m
shm_prefix="triton_python_backend_shm_region_$$_"
case "$*" in
    *shm-region-prefix-name=*) own_prefix=() ;;
    *) own_prefix=("--backend-config=python,shm-region-prefix-name=$shm_prefix") ;;
esac
# Niced: on cores the models keep busy, the API workers answer refusals and readiness first.
nice -n {TRITON_NICENESS} {shlex.join(server)} "${{own_prefix[@]}}" "$@" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null' TERM INT
wait "$server"
status=$?
while kill -0 "$server" 2>/dev/null; do  # a trapped signal ended the wait, not the server
    wait "$server"
    status=$?
done
kill -KILL -- "-$server" 2>/dev/null
rm -f -- /dev/shm/"$shm_prefix"*
exit "$status"
"""


def _installed_wrapper(installed: Path) -> str:
    """Wrapper around an installed tritonserver, which runs as it is, in the environment it is started with."""
    return _supervising_wrapper(f"the installed {installed}", [], [str(installed)])


def _pytriton_wrapper() -> str:
    """Wrapper around the tritonserver binary that nvidia-pytriton ships."""
    try:
        import pytriton
    except ImportError as error:
        raise ProvisionError("nvidia-pytriton is not installed and no tritonserver was found") from error
    bundle = Path(pytriton.__file__).parent / "tritonserver"
    python_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = bundle / "python_backend_stubs" / python_version / "triton_python_backend_stub"
    if not stub.is_file():
        available = sorted(p.name for p in (bundle / "python_backend_stubs").iterdir())
        raise ProvisionError(f"nvidia-pytriton has no python backend stub for Python {python_version} (has {available})")

    # The python backend looks for its stub next to libtriton_python.so, so
    # assemble a backend directory here instead of writing into site-packages.
    backends = Path(sys.prefix) / "share" / "tritonserver" / "backends"
    python_backend = backends / "python"
    python_backend.mkdir(parents=True, exist_ok=True)
    for source in (
        bundle / "backends" / "python" / "libtriton_python.so",
        bundle / "backends" / "python" / "triton_python_backend_utils.py",
        stub,
    ):
        link = python_backend / source.name
        link.unlink(missing_ok=True)
        link.symlink_to(source)

    library_dirs = [sysconfig.get_config_var("LIBDIR"), str(bundle.parent.parent / "nvidia_pytriton.libs")]
    return _supervising_wrapper(
        f"tritonserver from nvidia-pytriton, python backend stub for Python {python_version}",
        [
            "# The stub embeds libpython and finds this environment's packages through the python3 first on PATH.",
            f'export PATH="{venv_bin()}:$PATH"',
            f'export LD_LIBRARY_PATH="{":".join(library_dirs)}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"',
        ],
        [
            str(bundle / "bin" / "tritonserver"),
            f"--backend-directory={backends}",
            f"--cache-directory={bundle / 'caches'}",
        ],
    )


def provision(bin_dir: Path | None = None) -> tuple[Path, str]:
    """Create or refresh `tritonserver` in `bin_dir` (this environment's bin by default); idempotent.

    Returns its path and where it comes from.
    """
    target = (bin_dir or venv_bin()) / "tritonserver"
    installed = _installed_server(target)
    if installed is not None:
        script, origin = _installed_wrapper(installed), f"wrapper around installed {installed}"
    else:
        script, origin = _pytriton_wrapper(), "wrapper around nvidia-pytriton's tritonserver"
    # Written aside, then renamed over the target: never through an earlier link into the installed binary, and
    # a wrapper that is running (bash reads its script as it goes) keeps reading the old file.
    written = target.with_name(f".{target.name}.{os.getpid()}")
    written.write_text(script)
    written.chmod(0o755)
    written.replace(target)
    return target, origin
