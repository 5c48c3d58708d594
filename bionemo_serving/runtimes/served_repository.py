"""The folder a start hands to tritonserver: the model repository as it is, but for the configs of the timed graphs,
which name the runtime chosen for this start.

A start's choice of runtimes (BIONEMO_RUNTIME, or the timings on this machine) is its own. Written into the
repository's configs, it changed what every other service serving the same folder would run at its next load of the
model, and what a running service's config said it ran (a test's start with a forced runtime rewrote the config of the
suite's shared service). So each start serves a folder of its own under the temporary directory: every model folder of
the repository linked, the timed graphs' folders made of links to their files and a config written anew. No start changes what the
repository serves (it keeps only its timings there, runtime.json, for the next start on this machine); the folder of a
start whose process has ended is removed by the next start.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from bionemo_serving.runtimes.choice import Choice
from bionemo_serving.runtimes.engines import SHARED_WEIGHTS, process_start

PREFIX = "bionemo-served-repository-"


def served_repository(repository: Path, choices: Mapping[str, Choice], parent: Path | None = None) -> Path:
    """A new folder under `parent` (the temporary directory) that serves `repository` with each Triton model of
    `choices` running its chosen runtime. It is named after this process, which becomes `bentoml serve`."""
    parent = Path(parent or tempfile.gettempdir())
    remove_ended(parent)
    me = os.getpid()
    served = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{me}-{process_start(me)}-", dir=parent))
    served.chmod(0o755)  # mkdtemp makes it private; tritonserver may run as another user
    for model in sorted(entry for entry in repository.iterdir() if entry.is_dir()):
        choice = choices.get(model.name)
        if choice is None:
            (served / model.name).symlink_to(model.resolve(), target_is_directory=True)
            continue
        (served / model.name).mkdir()
        for entry in model.iterdir():
            if entry.name != "config.pbtxt":
                (served / model.name / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
        (served / model.name / "config.pbtxt").write_text(choice.config_text())
    return served


def remove_ended(parent: Path) -> None:
    """The served folders of starts whose process has ended: nothing else would remove them."""
    for folder in parent.glob(f"{PREFIX}*"):
        pid, started, _ = (folder.name.removeprefix(PREFIX).split("-", 2) + ["", ""])[:3]
        if not (pid.isdigit() and started.isdigit() and process_start(int(pid)) == int(started)):
            shutil.rmtree(folder, ignore_errors=True)


def relink(repository: Path) -> int:
    """Hardlink again the weights files of `repository` that are copies of one another: a copy of a repository that
    kept no hardlinks (BentoML's build and the image's layers copy file by file) has each graph map a file of its own
    (bionemo_serving/exporter/shared_weights.py). Returns how many were linked."""
    by_content: dict[tuple[int, bytes], Path] = {}
    linked = 0
    for path in sorted(repository.glob(f"*/[0-9]*/{SHARED_WEIGHTS}")):
        first = by_content.setdefault((path.stat().st_size, _digest(path)), path)
        if first != path and not first.samefile(path):
            path.unlink()
            os.link(first, path)
            linked += 1
    return linked


def _digest(path: Path) -> bytes:
    digest = hashlib.blake2b(digest_size=32)
    with path.open("rb") as file:
        while chunk := file.read(1 << 24):
            digest.update(chunk)
    return digest.digest()
