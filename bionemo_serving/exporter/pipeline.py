"""load -> convert -> verify -> write: one checkpoint into one version of each of its Triton models."""

from __future__ import annotations

import enum
import shutil
import tempfile
import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from bionemo_serving.exporter.architectures import attention_implementation, load_for_export
from bionemo_serving.exporter.exportable import ExportableModel
from bionemo_serving.exporter.graph_inputs import GraphInputs, trace_inputs, verification_inputs
from bionemo_serving.exporter.navigator import navigator_version, optimize_with_navigator
from bionemo_serving.exporter.onnx_export import ONNX_OPSET, export_onnx, external_data_path, input_names, install_onnx
from bionemo_serving.exporter.progress import Progress, Silent
from bionemo_serving.exporter.quantize import QUANTIZED_ROLES, Answers, GateReport, Recipe, gate_answers, quantize_gated
from bionemo_serving.exporter.quantize_openvino import quantize_openvino_gated
from bionemo_serving.exporter.runtime_export import CONVERTERS, Converter, written_files
from bionemo_serving.exporter.shared_weights import SharedWeights, share_weights
from bionemo_serving.exporter.triton_config import config_path, read_exports, render_config
from bionemo_serving.exporter.verify import (
    PROVIDERS,
    ParityReport,
    check_parity,
    check_runtime_parity,
    require_providers,
)
from bionemo_serving.model_catalog import ExportRecord, GraphSpec, ModelDescription, OnnxGraph, Precision, Target
from bionemo_serving.runtimes.engines import RECORD, Runtime, open_engine

RUNTIMES = Path(__file__).resolve().parent.parent / "runtimes"
"""The engines (`engines.py`) and one python-backend model file per model_catalog.Backend (`backends/`), copied
beside each other into each version as `engines.py` and `model.py`."""
NOT_ASKED = "not asked for (--runtimes)"
"""The export summary's reason for a runtime left out by request; runtime.json then says it was not exported."""
UNTIMED = "not used: the graph runs onnxruntime untimed (model_catalog.GraphSpec.timed)"
"""Why a graph asked for rarely (layers, contacts) gets no other runtime's file: it would never be served."""
INT8_ELSEWHERE = "not used: the graph is served in INT8, on onnxruntime or OpenVINO (exporter/quantize*.py)"
"""Why a graph that passed the INT8 gate gets no onnxruntime-fused or TorchScript file: those would run it in FP32."""
INT8_RUNTIMES = (Runtime.OPENVINO,)
"""The runtimes besides onnxruntime that quantize a graph themselves: their FP32 file, once it matches torch, is
quantized and gated (bionemo_serving/exporter/quantize_openvino.py)."""
GATE_SEED, NAVIGATOR_SEED = 0, 1
"""Navigator checks itself on other batches than the gate does."""


class Optimizer(str, enum.Enum):
    """What turns the torch graph into the served ONNX file."""

    BUILTIN = "builtin"
    """torch.onnx's legacy (TorchScript) exporter, which matched torch best here."""
    NAVIGATOR = "navigator"
    """Triton Model Navigator's optimize: export, graph optimisation, correctness check, profiling."""


@dataclass(frozen=True)
class GraphReport:
    triton_name: str
    version_dir: Path
    onnx_files: list[str]
    onnx_bytes: int
    """The ONNX files, without the weights they read from the model's shared file."""
    parity: ParityReport
    """The worst of the graph's ONNX files."""
    configs: list[Path]
    runtimes: dict[Runtime, ParityReport | GateReport | str]
    """Each CPU runtime written beside the ONNX file with its gate (its INT8 gate where it serves INT8), or why it was
    left out."""
    precision: Precision = Precision.FP32
    """What the served ONNX file computes in."""
    int8_gate: GateReport | None = None
    """Where INT8 was asked of the graph: its accuracy gate, and so why it is served in `precision`."""


@dataclass(frozen=True)
class ExportReport:
    model: str
    checkpoint: Path
    target: Target
    format: str
    graphs: list[GraphReport]
    weights: SharedWeights
    seconds: float
    left_out: dict[str, str]
    """Optional graphs the checkpoint cannot give (by Triton name), and why."""

    def summary(self) -> str:
        lines = [
            f"{self.model}: exported from {self.checkpoint} in {self.seconds:.1f} s",
            f"  format: {self.format}; verified for target {self.target.value}",
        ]
        for graph in self.graphs:
            parity = graph.parity
            files = ", ".join(str(graph.version_dir / name) for name in graph.onnx_files)
            lines += [
                f"  {graph.triton_name}: {files} ({graph.onnx_bytes / 2**20:.1f} MiB, {graph.precision.value})",
                f"    parity: max |onnxruntime - torch| = {parity.max_abs_diff:.2e} <= {parity.tolerance:.0e} "
                f"({self.target.precision.value} on {parity.provider}), {parity.values_compared:,} values in "
                f"{parity.batches} padded batches of mixed lengths",
                f"    configs: {', '.join(str(path) for path in graph.configs)}",
            ]
            if graph.int8_gate is not None:
                lines.append(f"    {graph.int8_gate}")
            for runtime, outcome in graph.runtimes.items():
                if isinstance(outcome, ParityReport):
                    lines.append(f"    {runtime.value}: max |{runtime.value} - torch| = {outcome.max_abs_diff:.2e}")
                elif isinstance(outcome, GateReport):
                    lines.append(f"    {runtime.value}: {outcome}")
                else:
                    lines.append(f"    {runtime.value}: left out ({outcome})")
        lines += [f"  {name}: not exported ({why})" for name, why in self.left_out.items()]
        lines.append(f"  {self.weights}")
        written = {path.stat().st_ino: path for graph in self.graphs for path in graph.version_dir.rglob("*") if path.is_file()}
        disk = sum(path.stat().st_size for path in written.values()) / 2**30
        lines.append(f"  disk: {disk:.2f} GiB in {len(written)} files (each hardlinked file once)")
        return "\n".join(lines)


def export_model(
    description: ModelDescription,
    checkpoint: Path,
    repository: Path,
    *,
    version: int = 1,
    target: Target = Target.CPU,
    optimizer: Optimizer = Optimizer.BUILTIN,
    tolerance: float | None = None,
    external_data: bool = False,
    runtimes: Collection[Runtime] = tuple(CONVERTERS),
    progress: Progress = Silent(),
    weights: str | None = None,
    precision: Precision = Precision.FP32,
) -> ExportReport:
    """Export every graph of `checkpoint` as `repository/<triton name>/<version>`, with every target's config.

    Nothing is written unless every graph passes the parity gate on `target`'s
    execution provider (`tolerance` defaults to the one of its precision).
    A graph over protobuf's 2 GB is traced into ONNX external data (`external_data` forces that path on any graph);
    in the end every ONNX file's tensors lie in the version's one `model.weights` (exporter/shared_weights.py).
    The ONNX file is always written; of the other runtimes only
    those in `runtimes` are (each conversion and its gate takes seconds to minutes), and only for the graphs whose
    runtime is timed (GraphSpec.timed): the others always run onnxruntime.
    Every config records where the weights came from (parameter `checkpoint`, which GET /models shows): `weights`,
    or else the checkpoint's file or folder name (`python -m bionemo_serving.exporter defaults` gives model_catalog.RANDOM_INIT_WEIGHTS).
    With `precision` INT8, the encoder and language-model graphs are quantized and served in INT8 where they pass
    the accuracy gate (exporter/quantize.py), else in FP32; each version's precision is recorded in its config.
    """
    started = time.perf_counter()
    weights = weights or checkpoint.resolve().name
    require_providers(target)  # both checks fail before a long load
    if optimizer is Optimizer.NAVIGATOR:
        onnx_format = f"ONNX from Triton Model Navigator {navigator_version()}"
    else:
        onnx_format = f"ONNX opset {ONNX_OPSET}, torch.onnx legacy exporter"
    with progress.stage("load", f"{description.name} from {checkpoint}"):
        # The ONNX file every target serves computes attention as plain ops: torch's export of sdpa adds a Where
        # over the mask and an IsNaN guard on every [rows, heads, L, L] tensor (a third of ESM's time on CPU).
        loaded = load_for_export(description, checkpoint, attention="eager")
    repository.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=repository, prefix=".export-") as staging:
        staged: dict[GraphSpec, tuple[Path, ParityReport]] = {}
        graph_runtimes: dict[GraphSpec, dict[Runtime, ParityReport | GateReport | str]] = {}
        int8_gates: dict[GraphSpec, GateReport] = {}
        for graph in (graph for graph in description.graphs if graph.role in loaded.graphs):
            name = description.triton_name(graph.role)
            version_dir = Path(staging) / name / str(version)
            version_dir.mkdir(parents=True)
            parities = []
            outcomes: dict[Runtime, dict[str, ParityReport | GateReport | str]] = {runtime: {} for runtime in CONVERTERS}
            for part in graph.onnx_graphs:
                module = loaded.module(graph, part)
                with progress.stage("convert", f"{name} {part.file} to ONNX ({optimizer.value})"):
                    _convert(description, graph, part, module, loaded, optimizer, target, version_dir, external_data)
                provider = PROVIDERS[target][0][0]
                with progress.stage("verify", f"{name} {part.file} against torch on {provider}"):
                    batches = verification_inputs(description, graph.role, loaded.graphs, GATE_SEED, part.name)
                    onnx_path = version_dir / part.file
                    parities.append(check_parity(module, onnx_path, part, batches, name, target, tolerance))
                expected: Answers | None = None
                if precision is Precision.INT8 and graph.role in QUANTIZED_ROLES:
                    with progress.stage("quantize", f"{name} {part.file} to INT8, gated against its FP32 graph"):
                        expected = gate_answers(description, graph.role, open_engine(Runtime.ONNXRUNTIME, onnx_path))
                        int8_gates[graph] = _quantize(description, graph, onnx_path, expected, _model_recipe(int8_gates))
                served_int8 = graph in int8_gates and int8_gates[graph].passed
                sample = trace_inputs(description, graph.role, loaded.graphs, part.name)
                with attention_implementation(module, "sdpa"):  # what makes each of them fuse attention
                    for runtime, convert in CONVERTERS.items():
                        if runtime not in runtimes or not graph.timed or (served_int8 and runtime not in INT8_RUNTIMES):
                            outcomes[runtime][part.name] = (
                                NOT_ASKED if runtime not in runtimes else UNTIMED if not graph.timed else INT8_ELSEWHERE
                            )
                            continue
                        with progress.stage("convert", f"{name} {runtime.file(part.name)} ({runtime.value})"):
                            outcomes[runtime][part.name] = _convert_runtime(
                                runtime, convert, module, part, sample, batches, version_dir, name, tolerance,
                                external_data,
                            )  # fmt: skip
                        if served_int8 and isinstance(outcomes[runtime][part.name], ParityReport):
                            with progress.stage("quantize", f"{name} {runtime.file(part.name)} to INT8 (NNCF), gated"):
                                outcomes[runtime][part.name] = _quantize_openvino(
                                    description, graph, version_dir / runtime.file(part.name), expected
                                )
            graph_runtimes[graph] = {
                runtime: _every_part(runtime, graph, outcomes[runtime], version_dir) for runtime in CONVERTERS
            }
            shutil.copy(RUNTIMES / "backends" / f"{graph.backend.value}.py", version_dir / "model.py")
            shutil.copy(RUNTIMES / "engines.py", version_dir / "engines.py")
            staged[graph] = (version_dir, _worst(parities))
        with progress.stage("share", "the tensors of every ONNX file into one model.weights"):
            shared = share_weights([version_dir for version_dir, _ in staged.values()])
        names = ", ".join(description.triton_name(graph.role) for graph in staged)
        with progress.stage("write", f"{names} version {version} into {repository}"):
            reports = [
                _publish(
                    description, graph, loaded, repository, staged_version, parity, graph_runtimes[graph], weights,
                    int8_gates.get(graph),
                )
                for graph, (staged_version, parity) in staged.items()
            ]  # fmt: skip
            shared = replace(shared, path=reports[0].version_dir / shared.path.name)
            left_out = {
                description.triton_name(graph.role): _withdraw(description, graph, repository, version)
                for graph in description.graphs
                if graph not in staged
            }
    seconds = time.perf_counter() - started
    return ExportReport(description.name, checkpoint, target, onnx_format, reports, shared, seconds, left_out)


def _withdraw(description: ModelDescription, graph: GraphSpec, repository: Path, version: int) -> str:
    """An optional graph the checkpoint lacks the head for: the same version of it, exported from an earlier
    checkpoint, is removed (it would answer with another model's head), and its folder once no version is left.
    Returns why it was not exported."""
    model_dir = repository / description.triton_name(graph.role)
    shutil.rmtree(model_dir / str(version), ignore_errors=True)
    if model_dir.is_dir() and not any(entry.name.isdigit() for entry in model_dir.iterdir()):
        shutil.rmtree(model_dir)
    capabilities = ", ".join(sorted(capability.value for capability in graph.capabilities))
    return f"the checkpoint has no {graph.role.value.replace('_', '-')} head; {description.name} serves no {capabilities}"


def _convert(
    description: ModelDescription,
    graph: GraphSpec,
    part: OnnxGraph,
    module: torch.nn.Module,
    loaded: ExportableModel,
    optimizer: Optimizer,
    target: Target,
    version_dir: Path,
    external_data: bool,
) -> None:
    """Write `version_dir / part.file`, traced from `module`."""
    path = version_dir / part.file
    if optimizer is Optimizer.BUILTIN:
        sample = trace_inputs(description, graph.role, loaded.graphs, part.name)
        export_onnx(module, part, sample, path, external_data)
        return
    samples = verification_inputs(description, graph.role, loaded.graphs, NAVIGATOR_SEED, part.name)
    workspace = version_dir.parent / ".navigator"
    best = optimize_with_navigator(module, part, samples, target, description.batching.max_batch_size, workspace)
    install_onnx(best, path, external_data)
    shutil.rmtree(workspace)


def _publish(
    description: ModelDescription,
    graph: GraphSpec,
    loaded: ExportableModel,
    repository: Path,
    staged_version: Path,
    parity: ParityReport,
    runtimes: dict[Runtime, ParityReport | GateReport | str],
    weights: str,
    int8_gate: GateReport | None,
) -> GraphReport:
    """Move a verified version into the repository and write the model's config for every target, recording where
    the weights came from (`weights`) and the graph's precision, beside the records of the versions it keeps."""
    model_dir = repository / description.triton_name(graph.role)
    model_dir.mkdir(exist_ok=True)
    published = model_dir / staged_version.name
    earlier, _ = read_exports(model_dir)
    exports = {version: record for version, record in earlier.items() if (model_dir / str(version)).is_dir()}
    precision = Precision.INT8 if int8_gate is not None and int8_gate.passed else Precision.FP32
    exports[int(staged_version.name)] = ExportRecord(weights, precision)
    shutil.rmtree(published, ignore_errors=True)
    staged_version.chmod(0o755)  # mkdtemp makes it private; Triton may run as another user
    staged_version.rename(published)
    (model_dir / RECORD).unlink(missing_ok=True)  # timings of the graph this one replaces: timed again
    configs = []
    for target in Target:
        config_file = model_dir / config_path(target)
        config_file.parent.mkdir(exist_ok=True)
        config_file.write_text(render_config(description, graph, loaded.sizes, target, weights, exports))
        configs.append(config_file)
    onnx_paths = [published / part.file for part in graph.onnx_graphs]
    onnx_bytes = sum(path.stat().st_size for path in onnx_paths)
    names = [path.name for path in onnx_paths]
    return GraphReport(
        description.triton_name(graph.role), published, names, onnx_bytes, parity, configs, runtimes, precision,
        int8_gate,
    )  # fmt: skip


def _model_recipe(gates: dict[GraphSpec, GateReport]) -> Recipe | None:
    """The recipe the model's first graph to pass its gate was quantized by: one recipe for all, so that the graphs
    share their quantized tensors (quantize_gated)."""
    return next((gate.recipe for gate in gates.values() if gate.passed), None)


def _quantize(
    description: ModelDescription, graph: GraphSpec, onnx_path: Path, expected: Answers, first: Recipe | None
) -> GateReport:
    """Quantize the graph's ONNX file and gate it against the FP32 file's answers (`expected`), trying `first`
    first; where it passes, the INT8 file takes the FP32 one's place (its external data removed: the INT8 file holds
    its weights)."""
    int8_path = onnx_path.with_suffix(".int8.onnx")
    gate = quantize_gated(description, graph.role, onnx_path, int8_path, expected, first)
    if gate.passed:
        int8_path.replace(onnx_path)
        external_data_path(onnx_path).unlink(missing_ok=True)
    return gate


def _quantize_openvino(description: ModelDescription, graph: GraphSpec, ir: Path, expected: Answers) -> GateReport | str:
    """The OpenVINO file of an INT8 graph quantized by NNCF and gated like the ONNX file; where no try passes,
    OpenVINO is left out (an FP32 file beside an INT8 graph would serve another precision) with the gate's figures."""
    report = quantize_openvino_gated(description, graph.role, ir, expected)
    if report.passed:
        return report
    return f"its INT8 failed the gate: {'; '.join(map(str, report.figures))}; {report.recipe}"


def _worst(parities: list[ParityReport]) -> ParityReport:
    """The worst of a graph's parts, counting the values compared in all of them."""
    worst = max(parities, key=lambda parity: parity.max_abs_diff)
    return replace(worst, values_compared=sum(parity.values_compared for parity in parities))


def _every_part(
    runtime: Runtime, graph: GraphSpec, outcomes: dict[str, ParityReport | GateReport | str], version_dir: Path
) -> ParityReport | GateReport | str:
    """A runtime serves a graph only with all of its parts (the decoder's cross_attention and step): one part left
    out leaves the runtime out, the other parts' files removed too."""
    named = len(outcomes) > 1
    reasons = [f"{part}: {why}" if named else why for part, why in outcomes.items() if isinstance(why, str)]
    if not reasons:
        if gates := [outcome for outcome in outcomes.values() if isinstance(outcome, GateReport)]:
            return gates[0]  # INT8: the quantized graphs (encoder, language model) have one part
        return _worst([outcome for outcome in outcomes.values() if isinstance(outcome, ParityReport)])
    for part in graph.onnx_graphs:
        for written in written_files(runtime, part, version_dir):
            written.unlink(missing_ok=True)
    return "; ".join(reasons)


def _convert_runtime(
    runtime: Runtime,
    convert: Converter,
    module: torch.nn.Module,
    part: OnnxGraph,
    sample: GraphInputs,
    batches: list[GraphInputs],
    version_dir: Path,
    name: str,
    tolerance: float | None,
    external_data: bool,
) -> ParityReport | str:
    """Write `part` for `runtime` and hold it to the gate; a runtime that is not installed, cannot convert the graph
    or fails the gate is left out (its files removed) with the reason: the ONNX file serves without it."""
    if not runtime.installed():
        return f"{runtime.library} is not installed"
    path = version_dir / runtime.file(part.name)
    try:
        convert(module, part, sample, path, external_data)
        engine = open_engine(runtime, path)
        return check_runtime_parity(module, engine, input_names(part, sample), part, batches, f"{name} {runtime.value}", tolerance)
    except Exception as error:  # noqa: BLE001 - any converter's failure only leaves this runtime out
        for written in written_files(runtime, part, version_dir):
            written.unlink(missing_ok=True)
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
