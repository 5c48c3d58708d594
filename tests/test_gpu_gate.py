"""tools/gpu_gate.py, the GPU check of exported graphs, dry-run here on the CPU provider so that it keeps working."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from exporter.verify import TOLERANCES
from model_catalog import Precision
from tools import gpu_gate

ROOT = Path(__file__).resolve().parent.parent
REPOSITORY = ROOT / "model_repository"


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gate-cases")
    gpu_gate.write(["megamolbart"], ROOT / "checkpoints", REPOSITORY, folder)
    return folder


def test_the_gate_cases_written_here_pass_on_the_cpu_provider(cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(path.name for path in cases.iterdir()) == [
        "megamolbart_decoder.cross_attention.npz", "megamolbart_decoder.step.npz", "megamolbart_encoder.model.npz",
        "megamolbart_layers.model.npz",
    ]  # fmt: skip
    assert gpu_gate.check(cases, REPOSITORY, "CPUExecutionProvider") == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| megamolbart")]
    assert len(rows) == 4
    for row in rows:
        assert float(row.split("|")[2]) <= gpu_gate.FP32_TOLERANCE


def test_a_graph_off_torch_fails_the_check(cases: Path, tmp_path: Path) -> None:
    """The check compares: torch's saved answers shifted past the tolerance fail it."""
    case = tmp_path / "megamolbart_encoder.model.npz"
    shutil.copy(cases / case.name, case)
    arrays = dict(np.load(case))
    for key in [key for key in arrays if "/torch/" in key]:
        arrays[key] = arrays[key] + 1e-3
    np.savez(case, **arrays)
    assert gpu_gate.check(tmp_path, REPOSITORY, "CPUExecutionProvider") == 1


def test_its_tolerance_is_the_gates() -> None:
    assert gpu_gate.FP32_TOLERANCE == TOLERANCES[Precision.FP32]
