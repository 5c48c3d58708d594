"""`python -m operations.tritonserver_setup [--check-timeout S]`: provision tritonserver, then prove it loads a python
model.

`<venv>/bin/tritonserver` is a wrapper that runs the server in a process group
of its own and ends the python backend stubs with it. It wraps the tritonserver
already installed, if any (the tritonserver image has /opt/tritonserver/bin),
and otherwise the binary bundled in nvidia-pytriton, with the python backend
stub of this interpreter's version in place. A stub of the wrong version makes
tritonserver hang while loading, so the check has a timeout. `--no-check`
provisions only, for an image build: the server starts when the container runs.
"""

from __future__ import annotations

import argparse
import sys

from operations.tritonserver_setup.check import check_loads_python_model
from operations.tritonserver_setup.provision import ProvisionError, provision
from bionemo_serving.startup.readiness import ReadinessTimeout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m operations.tritonserver_setup", description=__doc__)
    check = parser.add_mutually_exclusive_group()
    check.add_argument("--check-timeout", type=float, default=120.0, help="seconds to wait for readiness")
    check.add_argument("--no-check", action="store_true", help="provision only, start no server")
    args = parser.parse_args(argv)
    try:
        binary, origin = provision()
        print(f"tritonserver: {binary} ({origin})")
        if args.no_check:
            return 0
        seconds = check_loads_python_model(binary, args.check_timeout)
        print(f"tritonserver: loaded a python-backend model and became ready in {seconds:.1f} s")
    except (ProvisionError, ReadinessTimeout) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
