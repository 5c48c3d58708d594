"""The Java runtime pyspark starts (tests/e2e/test_spark_cluster_e2e.py, `make bench`'s Spark line), and `make test`'s provisioning.

    .venv/bin/python -m operations.tools.java_runtime --provision

pyspark runs `$JAVA_HOME/bin/java`, else the `java` on PATH. pyspark 3.5 (pyproject.toml's test extra) supports Java 8,
11 and 17; Debian 12's default-jre-headless is 17. `--provision` installs default-jre-headless with apt where no java is
found and this process is root, and otherwise fails naming what to install, as operations/container/engine.py does for podman.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from operations.tools import apt

APT_PACKAGES = ("default-jre-headless",)
SUPPORTED = (8, 11, 17)
"""The Java versions Spark 3.5 supports."""


class JavaMissing(RuntimeError):
    """No java here; the message says what to install."""


def java() -> str | None:
    """The java pyspark would run: $JAVA_HOME's, else the one on PATH; None where there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def version(executable: str) -> tuple[int, str]:
    """The major version of `executable` and the first line `java -version` writes ("openjdk version "17.0.15" ...")."""
    shown = subprocess.run([executable, "-version"], capture_output=True, text=True, timeout=60, check=False)
    first = (shown.stderr or shown.stdout).strip().splitlines()[0] if (shown.stderr or shown.stdout).strip() else ""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', first)
    if shown.returncode != 0 or found is None:
        raise JavaMissing(f"{executable} -version failed ({shown.returncode}): {first or 'no output'}")
    major = int(found.group(1))
    return (int(found.group(2) or 0) if major == 1 else major), first  # "1.8.0_392" is Java 8


def provision() -> str:
    """The java found, after installing APT_PACKAGES as root where there is none; elsewhere JavaMissing naming them."""
    found = java()
    if found:
        return found
    if not apt.can_install():
        raise JavaMissing(
            f"Spark's tests need Java {', '.join(map(str, SUPPORTED))}: install it (Debian or Ubuntu, as root: "
            f"apt-get install {' '.join(APT_PACKAGES)}) or set JAVA_HOME"
        )
    apt.install(APT_PACKAGES, recommends=False)
    found = java()
    if not found:
        raise JavaMissing(f"apt-get installed {' '.join(APT_PACKAGES)}, and still no java on PATH")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provision", action="store_true", help="install Java with apt where it is missing (root)")
    args = parser.parse_args(argv)
    try:
        executable = provision() if args.provision else java()
        if executable is None:
            raise JavaMissing(f"no java: install {' '.join(APT_PACKAGES)} or set JAVA_HOME")
        major, shown = version(executable)
    except (JavaMissing, subprocess.CalledProcessError) as error:
        print(f"java: {error}", file=sys.stderr)
        return 1
    print(f"java: {executable} ({shown})")
    if major not in SUPPORTED:
        print(f"java: Java {major} is not one Spark 3.5 supports ({', '.join(map(str, SUPPORTED))})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
