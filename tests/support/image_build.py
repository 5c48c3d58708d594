"""The image the image tests run, built in the background from the start of the session.

Its build from nothing (Debian's base from the mirror, then the stand-in's and the bento's packages) waits mostly on
downloads: started with the session, it is built while the tests before it run, instead of holding them up for
minutes when the first image test asks for it (tests/container/test_image_e2e.py's `image` fixture)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from support.paths import ROOT

from bionemo_serving.model_catalog import Target


class ImageBuild:
    """`python -m operations.container.image --base-image stand-in --target cpu` (what `make image BASE_IMAGE=stand-in` runs) in
    a process of its own, which also keeps the bento's build from importing the service into this process."""

    def __init__(self) -> None:
        from operations.container.image import STAND_IN  # it imports the exporter, torch: only in a session that builds

        self.log_path = Path(tempfile.mkstemp(prefix="image-build-", suffix=".log")[1])
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "operations.container.image", "--base-image", STAND_IN, "--target", Target.CPU.value],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def result(self, timeout_s: float) -> tuple[int, str]:
        """The build's exit status and its output, once it has ended (killed after `timeout_s` from now)."""
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
        return self.process.returncode, self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """End the build and whatever it started, where it still runs (a session cut short); remove its log."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log_path.unlink(missing_ok=True)
