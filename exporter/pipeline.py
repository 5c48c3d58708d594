"""load -> convert -> verify -> write: one checkpoint into one version of each of its Triton models."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from exporter.architectures import load_for_export
from exporter.graph_inputs import trace_inputs, verification_inputs
from exporter.onnx_export import export_onnx, external_data_path
from exporter.triton_config import ONNX_FILE, config_path, render_config
from exporter.verify import DEFAULT_TOLERANCE, ParityReport, check_parity
from model_catalog import ModelDescription, Target

BACKEND_SOURCE = Path(__file__).parent / "triton_backend" / "model.py"


@dataclass(frozen=True)
class GraphReport:
    triton_name: str
    version_dir: Path
    onnx_bytes: int
    """The graph and its external data, if any."""
    parity: ParityReport


@dataclass(frozen=True)
class ExportReport:
    model: str
    graphs: list[GraphReport]
    seconds: float

    def summary(self) -> str:
        lines = [f"{self.model}: exported in {self.seconds:.1f} s"]
        for graph in self.graphs:
            lines.append(
                f"  {graph.version_dir} ({graph.onnx_bytes / 2**20:.1f} MiB ONNX): max |onnxruntime - torch| = "
                f"{graph.parity.max_abs_diff:.2e} over {graph.parity.values_compared} values in "
                f"{graph.parity.batches} padded batches"
            )
        return "\n".join(lines)


def export_model(
    description: ModelDescription,
    checkpoint: Path,
    repository: Path,
    version: int = 1,
    tolerance: float = DEFAULT_TOLERANCE,
    external_data: bool = False,
) -> ExportReport:
    """Export every graph of `checkpoint` as `repository/<triton name>/<version>`.

    Nothing is written unless every graph passes the parity gate. Weights go to
    ONNX external data when a graph is over 2 GB, or always with `external_data`.
    """
    started = time.perf_counter()
    loaded = load_for_export(description, checkpoint)
    repository.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=repository, prefix=".export-") as staging:
        staged: dict[str, tuple[Path, ParityReport]] = {}
        for graph in description.graphs:
            name = description.triton_name(graph.role)
            module = loaded.graphs[graph.role]
            version_dir = Path(staging) / name / str(version)
            version_dir.mkdir(parents=True)
            sample = trace_inputs(description, graph.role, loaded.graphs)
            export_onnx(module, graph, sample, version_dir / ONNX_FILE, external_data)
            batches = verification_inputs(description, graph.role, loaded.graphs, seed=0)
            parity = check_parity(module, version_dir / ONNX_FILE, graph, batches, name, tolerance)
            shutil.copy(BACKEND_SOURCE, version_dir / "model.py")
            for target in Target:
                config_file = version_dir.parent / config_path(target)
                config_file.parent.mkdir(exist_ok=True)
                config_file.write_text(render_config(description, graph, loaded.sizes, target))
            staged[name] = (version_dir, parity)
        reports = []
        for name, (staged_version, parity) in staged.items():
            model_dir = repository / name
            model_dir.mkdir(exist_ok=True)
            published = model_dir / str(version)
            shutil.rmtree(published, ignore_errors=True)
            staged_version.chmod(0o755)  # mkdtemp makes it private; Triton may run as another user
            staged_version.rename(published)
            for target in Target:
                (model_dir / config_path(target)).parent.mkdir(exist_ok=True)
                shutil.move(str(staged_version.parent / config_path(target)), model_dir / config_path(target))
            onnx_files = [published / ONNX_FILE, external_data_path(published / ONNX_FILE)]
            onnx_bytes = sum(path.stat().st_size for path in onnx_files if path.exists())
            reports.append(GraphReport(name, published, onnx_bytes, parity))
    return ExportReport(model=description.name, graphs=reports, seconds=time.perf_counter() - started)
