"""load -> convert -> verify -> write: one checkpoint into one model-repository version."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from exporter.architectures import load_for_export
from exporter.onnx_export import export_onnx
from exporter.triton_config import ONNX_FILE, render_config
from exporter.verify import DEFAULT_TOLERANCE, ParityReport, check_parity
from model_catalog import ModelDescription

BACKEND_SOURCE = Path(__file__).parent / "triton_backend" / "model.py"


@dataclass(frozen=True)
class ExportReport:
    model: str
    version_dir: Path
    onnx_bytes: int
    parity: ParityReport
    seconds: float

    def summary(self) -> str:
        return (
            f"{self.model}: wrote {self.version_dir} ({self.onnx_bytes / 2**20:.1f} MiB ONNX) in {self.seconds:.1f} s; "
            f"max |onnxruntime - torch| = {self.parity.max_abs_diff:.2e} over {self.parity.tokens_compared} tokens "
            f"in {self.parity.batches} padded batches"
        )


def export_model(
    description: ModelDescription,
    checkpoint: Path,
    repository: Path,
    version: int = 1,
    tolerance: float = DEFAULT_TOLERANCE,
) -> ExportReport:
    """Export `checkpoint` as `repository/<model>/<version>`; nothing is written unless the parity gate passes."""
    started = time.perf_counter()
    module = load_for_export(description, checkpoint)
    model_dir = repository / description.name
    model_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=model_dir, prefix=".export-") as staging:
        staged = Path(staging)
        export_onnx(module, description, staged / ONNX_FILE)
        parity = check_parity(module, staged / ONNX_FILE, description, tolerance)
        shutil.copy(BACKEND_SOURCE, staged / "model.py")
        version_dir = model_dir / str(version)
        shutil.rmtree(version_dir, ignore_errors=True)
        staged.chmod(0o755)  # mkdtemp makes it private; Triton may run as another user
        staged.rename(version_dir)
        staged.mkdir()  # TemporaryDirectory removes its path on exit
    (model_dir / "config.pbtxt").write_text(render_config(description, module.sizes))
    return ExportReport(
        model=description.name,
        version_dir=version_dir,
        onnx_bytes=(version_dir / ONNX_FILE).stat().st_size,
        parity=parity,
        seconds=time.perf_counter() - started,
    )
