"""operations/tools/gpu_gate.py, the GPU check of exported graphs, dry-run here on the CPU provider so that it keeps working: on
the tiny MegaMolBART's export (every kind of graph the tool handles: an encoder, the decoder's two parts, the layers),
as the tool runs on any export beside its checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from bionemo_serving.exporter.verify import TOLERANCES
from bionemo_serving.model_catalog import Precision
from support.checkpoints import TinyExport, TinyModels
from operations.tools import gpu_gate


@pytest.fixture(scope="module")
def exported(tiny_models: TinyModels) -> TinyExport:
    return tiny_models.export("megamolbart")


@pytest.fixture(scope="module")
def cases(exported: TinyExport, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gate-cases")
    gpu_gate.write(["megamolbart"], exported.checkpoint.parent, exported.repository, folder)
    return folder


@pytest.mark.e2e
def test_the_gate_cases_written_here_pass_on_the_cpu_provider(
    cases: Path, exported: TinyExport, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sorted(path.name for path in cases.iterdir()) == [
        "megamolbart_decoder.cross_attention.npz", "megamolbart_decoder.step.npz", "megamolbart_encoder.model.npz",
        "megamolbart_layers.model.npz",
    ]  # fmt: skip
    assert gpu_gate.check(cases, exported.repository, "CPUExecutionProvider") == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| megamolbart")]
    assert len(rows) == 4
    for row in rows:
        assert float(row.split("|")[2]) <= gpu_gate.FP32_TOLERANCE


@pytest.mark.e2e
def test_a_graph_off_torch_fails_the_check(cases: Path, exported: TinyExport, tmp_path: Path) -> None:
    """The check compares: torch's saved answers shifted past the tolerance fail it."""
    case = tmp_path / "megamolbart_encoder.model.npz"
    shutil.copy(cases / case.name, case)
    arrays = dict(np.load(case))
    for key in [key for key in arrays if "/torch/" in key]:
        arrays[key] = arrays[key] + 1e-3
    np.savez(case, **arrays)
    assert gpu_gate.check(tmp_path, exported.repository, "CPUExecutionProvider") == 1


def test_its_tolerance_is_the_gates() -> None:
    assert gpu_gate.FP32_TOLERANCE == TOLERANCES[Precision.FP32]
