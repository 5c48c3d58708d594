"""`python -m bionemo_serving.exporter export` run through: stages shown as they run, a summary, the runtimes asked
for, the Navigator path, and `make models` beside a user's own export. The refusals, before any export, are
tests/unit/test_exporter_cli.py's."""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from bionemo_serving.exporter.__main__ import main
from bionemo_serving.exporter.pipeline import UNTIMED, Optimizer, export_model
from bionemo_serving.exporter.runtime_export import CONVERTERS
from bionemo_serving.exporter.triton_config import recorded_checkpoint
from bionemo_serving.model_catalog import MODELS, GraphRole, Target
from bionemo_serving.runtimes.engines import SHARED_WEIGHTS, Runtime
from support.checkpoints import TINY_ESM2, TinyModels


@pytest.fixture(scope="module")
def checkpoint(tiny_models: TinyModels) -> Path:
    return tiny_models.checkpoint("esm2nv")


def read_config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_export_shows_each_stage_and_ends_with_a_summary(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["export", "esm2nv", "--checkpoint", str(checkpoint), "--repository", str(tmp_path), "--version", "4"]
    assert main([*arguments, "--max-batch-size", "12"]) == 0
    output = capsys.readouterr()
    stages = [line.split()[0] for line in output.err.splitlines() if line.endswith(("...", " s"))]
    runtimes = ["convert", "convert"] * len(CONVERTERS)  # the same graph for each runtime that fuses attention
    timed = ["convert", "convert", "verify", "verify", *runtimes]  # the encoder, the language model
    untimed = ["convert", "convert", "verify", "verify"]  # layers, contacts: their ONNX file alone
    assert stages == ["load", "load", *timed, *timed, *untimed, *untimed, "share", "share", "write", "write"]
    assert all("done in" in line for line in output.err.splitlines() if not line.endswith("..."))
    summary = output.out
    assert f"esm2nv: exported from {checkpoint} in " in summary
    assert "format: ONNX opset 17, torch.onnx legacy exporter; verified for target cpu" in summary
    assert f"{tmp_path / 'esm2nv' / '4' / 'model.onnx'} (" in summary and "MiB, FP32)" in summary
    assert "<= 1e-04 (FP32 on CPUExecutionProvider)" in summary and "3 padded batches" in summary
    assert f"configs: {tmp_path / 'esm2nv' / 'config.pbtxt'}, {tmp_path / 'esm2nv' / 'configs' / 'gpu.pbtxt'}" in summary
    for runtime in CONVERTERS:
        assert f"    {runtime.value}: max |{runtime.value} - torch| = " in summary
        assert f"    {runtime.value}: left out ({UNTIMED})" in summary
    assert {path.name for path in (tmp_path / "esm2nv_contacts" / "4").iterdir()} == {"model.onnx", "model.py", "engines.py", SHARED_WEIGHTS}
    for config_file in (tmp_path / "esm2nv").glob("**/*.pbtxt"):
        config = read_config(config_file)
        assert config.max_batch_size == 12
        assert list(config.dynamic_batching.preferred_batch_size) == [8]  # 16 and 32 are over the maximum


@pytest.mark.slow
def test_navigator_optimizes_and_its_result_passes_the_gate(checkpoint: Path, tmp_path: Path) -> None:
    """The real nav.torch.optimize (make install installs it with --no-deps) picks ONNX; the gate checks it again.
    Two of esm2nv's graphs (its encoder and language model; the others would add a minute of Navigator): Navigator
    keeps a registry of what it optimized, which failed the second graph until the exporter cleared it. The ONNX file
    alone (no other runtime's conversion: the other tests of this file convert them)."""
    graphs = tuple(graph for graph in TINY_ESM2.graphs if graph.role in {GraphRole.ENCODER, GraphRole.LANGUAGE_MODEL})
    tiny = replace(TINY_ESM2, batching=TINY_ESM2.batching.with_max_batch_size(4), graphs=graphs)
    report = export_model(tiny, checkpoint, tmp_path, target=Target.CPU, optimizer=Optimizer.NAVIGATOR, runtimes=())
    assert report.format.startswith("ONNX from Triton Model Navigator 0.14")
    graph, language_model = report.graphs  # Navigator optimizes each graph, one after the other, in one process
    assert language_model.triton_name == "esm2nv_language_model"
    for each in report.graphs:
        assert each.parity.max_abs_diff < 1e-4 and each.parity.batches == 3
        written = {path.name for path in each.version_dir.iterdir()}
        assert written == {"model.onnx", SHARED_WEIGHTS, "model.py", "engines.py"}
    assert not list(tmp_path.glob(".export-*"))
    # The graph Navigator wrote has the tensors the generated config declares, every variable axis dynamic.
    config = read_config(tmp_path / "esm2nv" / "config.pbtxt")
    model = onnx.load(str(graph.version_dir / "model.onnx"), load_external_data=False)
    for declared, actual in ((config.input, model.graph.input), (config.output, model.graph.output)):
        assert [tensor.name for tensor in declared] == [tensor.name for tensor in actual]
        for tensor, value in zip(declared, actual):
            shape = value.type.tensor_type.shape.dim
            assert shape[0].dim_param and [d.dim_value or -1 for d in shape[1:]] == list(tensor.dims)


@pytest.mark.slow
def test_runtimes_writes_only_the_ones_asked_for_beside_the_onnx_file(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["export", "esm2nv", "--checkpoint", str(checkpoint), "--repository", str(tmp_path)]
    assert main([*arguments, "--runtimes", "openvino"]) == 0
    summary = capsys.readouterr().out
    assert "    openvino: max |openvino - torch| = " in summary
    for runtime in set(CONVERTERS) - {Runtime.OPENVINO}:
        assert f"    {runtime.value}: left out (not asked for (--runtimes))" in summary
    written = sorted(path.name for path in (tmp_path / "esm2nv" / "1").glob("model.*"))
    assert written == ["model.onnx", "model.openvino.bin", "model.openvino.xml", "model.py", SHARED_WEIGHTS]
    assert main([*arguments, "--version", "2", "--runtimes"]) == 0  # none: the ONNX file alone
    assert sorted(path.name for path in (tmp_path / "esm2nv" / "2").glob("model.*")) == ["model.onnx", "model.py", SHARED_WEIGHTS]


def test_make_models_never_exports_the_defaults_over_a_users_own_version(checkpoint: Path, tmp_path: Path) -> None:
    """After a `git pull` the sources are newer than the repository's export: `make models` (which `make serve` and
    `make image` run) exports the random-init defaults again, but not over a version a user's export wrote."""
    repository = tmp_path / "repository"
    export_model(MODELS["esm2nv"], checkpoint, repository, runtimes=[])
    written = {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in repository.glob("*/1/model.onnx")}
    (repository / ".exported").touch()
    os.utime(repository / ".exported", (0, 0))  # older than every source: as after a pull
    project = Path(__file__).resolve().parents[2]
    made = subprocess.run(
        ["make", "--no-print-directory", "models", f"REPOSITORY={repository}", "EXPORT_MODELS=esm2nv"],
        cwd=project, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert "esm2nv: version 1 was exported from a user's checkpoint: " in made.stdout
    assert f"{repository / 'esm2nv' / '1'} (from {checkpoint.name})" in made.stdout
    assert "not exported over" in made.stdout
    assert {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in written} == written
    assert {recorded_checkpoint(path.parent.parent, 1) for path in written} == {checkpoint.name}
    assert (repository / ".exported").stat().st_mtime > 0  # the runtimes were timed on it and the marker renewed
