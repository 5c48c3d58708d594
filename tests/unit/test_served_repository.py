"""Each start serves its own choice of runtimes from a folder of its own: no start, and no test, changes what the
repository serves, nor what a running service's config says it runs (issue 37: a test's start with a forced runtime
rewrote the config of the suite's shared service through a linked model folder). Here over repositories of a test's
own; a start over the default repository is tests/e2e/test_served_repository_e2e.py's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bionemo_serving.runtimes.choice import METHOD, TOKEN_BATCHES, Choice, ModelFolder, Timings
from bionemo_serving.runtimes.engines import Arena, Runtime
from bionemo_serving.runtimes.served_repository import PREFIX, served_repository
from support.repositories import runtime_named


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """Two model folders as the exporter writes them (a config, a version with a graph file), nothing chosen."""
    for name in ("esm2nv", "prott5nv"):
        (tmp_path / "repository" / name / "1").mkdir(parents=True)
        (tmp_path / "repository" / name / "1" / "model.onnx").write_bytes(b"graph")
        (tmp_path / "repository" / name / "config.pbtxt").write_text(f'# {name}\n\nname: "{name}"\n')
    return tmp_path / "repository"


def choice(repository: Path, runtime: Runtime) -> dict[str, Choice]:
    timings = Timings("a CPU", 1, 1, {runtime.value: {"1x64": 1.0}}, {runtime.value: 0.0}, {}, METHOD)
    folder = ModelFolder(repository / "esm2nv", "esm2nv", TOKEN_BATCHES, ("model",), Arena.KEPT)
    return {"esm2nv": Choice(folder, runtime, timings, "BIONEMO_RUNTIME")}


def test_two_starts_over_one_repository_each_serve_their_own_choice(repository: Path, tmp_path: Path) -> None:
    exported = (repository / "esm2nv" / "config.pbtxt").read_text()
    first = served_repository(repository, choice(repository, Runtime.OPENVINO), tmp_path)
    second = served_repository(repository, choice(repository, Runtime.ONNXRUNTIME_FUSED), tmp_path)
    assert first != second and first.name.startswith(PREFIX)
    assert runtime_named(first / "esm2nv" / "config.pbtxt") == Runtime.OPENVINO.value
    assert runtime_named(second / "esm2nv" / "config.pbtxt") == Runtime.ONNXRUNTIME_FUSED.value
    assert (repository / "esm2nv" / "config.pbtxt").read_text() == exported
    for served in (first, second):
        assert (served / "esm2nv" / "1").resolve() == (repository / "esm2nv" / "1").resolve()
        assert (served / "esm2nv" / "1" / "model.onnx").read_bytes() == b"graph"
        assert (served / "prott5nv").is_symlink() and (served / "prott5nv").resolve() == repository / "prott5nv"


def test_the_folders_of_ended_starts_are_removed(repository: Path, tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f"{PREFIX}{ended.stdout.strip()}-1-abc"
    gone.mkdir()
    kept = served_repository(repository, {}, tmp_path)  # this process's, alive
    served_repository(repository, {}, tmp_path)
    assert not gone.exists() and kept.is_dir()
