"""Install `<venv>/bin/tritonserver`: a link to an installed server, or a wrapper around PyTriton's."""

from __future__ import annotations

import os
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
    """A tritonserver installed outside this environment, if any."""
    search = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != target.parent)
    found = shutil.which("tritonserver", path=search)
    if found:
        return Path(found)
    return INSTALLED_SERVER if INSTALLED_SERVER.is_file() else None


def _pytriton_wrapper(target: Path) -> str:
    """Shell wrapper around the tritonserver binary that nvidia-pytriton ships."""
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
    return f"""#!/usr/bin/env bash
# Written by `python -m tritonserver_setup`: tritonserver from nvidia-pytriton, python backend stub for Python {python_version}.
# The stub embeds libpython and finds this environment's packages through the python3 first on PATH.
export PATH="{target.parent}:$PATH"
export LD_LIBRARY_PATH="{':'.join(library_dirs)}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
# tritonserver runs in a process group of its own (job control), so that the python backend stubs it starts end
# with it however it ends: the stubs of a killed server otherwise live on, each holding its model's memory.
set -m
"{bundle / 'bin' / 'tritonserver'}" --backend-directory="{backends}" --cache-directory="{bundle / 'caches'}" "$@" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null' TERM INT
wait "$server"
status=$?
while kill -0 "$server" 2>/dev/null; do  # a trapped signal ended the wait, not the server
    wait "$server"
    status=$?
done
kill -KILL -- "-$server" 2>/dev/null
exit "$status"
"""


def provision() -> tuple[Path, str]:
    """Create or refresh `<venv>/bin/tritonserver`; idempotent. Returns its path and where it comes from."""
    target = venv_bin() / "tritonserver"
    existing = _installed_server(target)
    if existing is not None:
        if target.is_symlink() or target.exists():
            target.unlink()
        target.symlink_to(existing)
        return target, f"link to installed {existing}"
    script = _pytriton_wrapper(target)
    if target.is_symlink():
        target.unlink()
    target.write_text(script)
    target.chmod(0o755)
    return target, "wrapper around nvidia-pytriton's tritonserver"
