"""INT8 at export: the encoder and language-model graphs quantized, each held to the accuracy gate against its own
FP32 graph, served in INT8 only where it passes, and the precision recorded for the service (bionemo_serving/exporter/quantize.py).

The INT8 embeddings are also held to transformers' own, on the same weights: the gate compares two ONNX files."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from bionemo_serving.exporter import export_model, quantize
from bionemo_serving.exporter.quantize import (
    MIN_COSINE,
    GateFigure,
    GateReport,
    Recipe,
    gate_answers,
    has_vnni,
    quantize_gated,
    recipes,
)
from bionemo_serving.exporter.quantize_openvino import NncfRecipe
from bionemo_serving.exporter.triton_config import read_exports
from bionemo_serving.model_catalog import SCORED_AMINO_ACIDS, ExportRecord, GraphRole, Precision
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.runtimes.engines import Runtime, open_engine
from support.checkpoints import TinyModels, tiny

QUANTIZED_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "DynamicQuantizeMatMul"}
OUTLIER_SCALE = 300.0
"""One hidden channel scaled up this much before every layer's matrix products: outlier features, which per-tensor
activation quantization cannot represent (what SmoothQuant was made for)."""


def operators(path: Path) -> set[str]:
    return {node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node}


def quantized_weights(path: Path) -> set[tuple[str, str]]:
    """Where the file's 8-bit tensors lie in external data: (offset, length) of each."""
    found = set()
    for tensor in onnx.load(str(path), load_external_data=False).graph.initializer:
        if tensor.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8) and tensor.external_data:
            where = {entry.key: entry.value for entry in tensor.external_data}
            found.add((where["offset"], where["length"]))
    return found


def embeddings_cosine_to_transformers(checkpoint: Path, path: Path, runtime: Runtime = Runtime.ONNXRUNTIME) -> float:
    """The worst cosine between the served file's embeddings (run by `runtime`) and transformers' mean of the
    residues' states."""
    from transformers import EsmModel

    tokenizer = tokenizer_for(tiny("esm2nv"))
    rng = np.random.default_rng(5)
    proteins = ["".join(rng.choice(list(SCORED_AMINO_ACIDS), size=length)) for length in (5, 40, 90)]
    feeds = tokenizer.pad([tokenizer.encode(protein) for protein in proteins]).model_inputs()
    (served,) = open_engine(runtime, path).run(["embeddings"], feeds, threads=1)
    with torch.inference_mode():
        model = EsmModel.from_pretrained(checkpoint, add_pooling_layer=False).eval()
        states = model(input_ids=torch.from_numpy(feeds["input_ids"]), attention_mask=torch.from_numpy(feeds["attention_mask"]))
    weights = torch.from_numpy(feeds["pooling_mask"]).unsqueeze(-1).float()
    expected = ((states.last_hidden_state * weights).sum(1) / weights.sum(1)).numpy()
    cosine = (served * expected).sum(-1) / (np.linalg.norm(served, axis=-1) * np.linalg.norm(expected, axis=-1))
    return float(cosine.min())


@pytest.fixture(scope="module")
def outlier_checkpoint(tiny_models: TinyModels, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny esm2nv checkpoint with one outlier channel in every layer's LayerNorms."""
    from transformers import EsmForMaskedLM

    source = tiny_models.checkpoint("esm2nv")
    folder = tmp_path_factory.mktemp("outlier") / "esm2nv-outlier"
    shutil.copytree(source, folder)
    model = EsmForMaskedLM.from_pretrained(folder)
    with torch.no_grad():
        for layer in model.esm.encoder.layer:
            layer.attention.LayerNorm.weight[3] = OUTLIER_SCALE
            layer.LayerNorm.weight[3] = OUTLIER_SCALE
    model.save_pretrained(folder)
    return folder


@pytest.mark.e2e
def test_int8_serves_the_gated_graphs_in_int8_and_records_each_graphs_precision(
    tiny_models: TinyModels, tmp_path: Path
) -> None:
    checkpoint = tiny_models.checkpoint("esm2nv")
    report = export_model(tiny("esm2nv"), checkpoint, tmp_path, runtimes=[Runtime.OPENVINO], precision=Precision.INT8)
    precisions = {graph.triton_name: graph.precision for graph in report.graphs}
    assert precisions == {
        "esm2nv": Precision.INT8, "esm2nv_language_model": Precision.INT8,
        "esm2nv_layers": Precision.FP32, "esm2nv_contacts": Precision.FP32,
    }  # fmt: skip
    for graph in report.graphs:
        served = operators(graph.version_dir / "model.onnx")
        assert bool(served & QUANTIZED_OPS) == (graph.precision is Precision.INT8), graph.triton_name
        assert read_exports(tmp_path / graph.triton_name)[0] == {1: ExportRecord(checkpoint.name, graph.precision)}
        assert not list(graph.version_dir.glob("*.int8.onnx"))  # the INT8 file took the FP32 one's place
    gated = {graph.triton_name: graph.int8_gate for graph in report.graphs}
    assert gated["esm2nv_layers"] is None and gated["esm2nv_contacts"] is None  # never asked of them
    spearman, pppl = gated["esm2nv_language_model"].figures
    assert spearman.name == "scan Spearman" and pppl.name.startswith("pseudo-perplexity change (FP32 ")
    assert gated["esm2nv"].recipe == Recipe(reduce_range=not has_vnni())  # the first try passed
    assert gated["esm2nv_language_model"].recipe == gated["esm2nv"].recipe  # one recipe for the model's graphs
    encoder, language_model = (tmp_path / name / "1" / "model.onnx" for name in ("esm2nv", "esm2nv_language_model"))
    assert quantized_weights(encoder) and quantized_weights(language_model) == quantized_weights(encoder)  # held once
    assert "INT8 gate INT8 served (embeddings cosine (worst) 0.99" in report.summary()
    assert recipes(tmp_path / "esm2nv_layers" / "1" / "model.onnx", vnni=True) == [Recipe()]  # 2 layers: none kept
    without_vnni = recipes(tmp_path / "esm2nv_layers" / "1" / "model.onnx", vnni=False)
    assert without_vnni == [Recipe(reduce_range=True), Recipe(unsigned_weights=True)]
    assert embeddings_cosine_to_transformers(checkpoint, tmp_path / "esm2nv" / "1" / "model.onnx") >= MIN_COSINE
    for graph in report.graphs[:2]:  # OpenVINO's file of each INT8 graph: quantized by NNCF, gated the same way
        gated_openvino = graph.runtimes[Runtime.OPENVINO]
        assert isinstance(gated_openvino, GateReport) and gated_openvino.passed, graph.triton_name
        assert isinstance(gated_openvino.recipe, NncfRecipe)
        assert f"openvino: {gated_openvino}" in report.summary()
        assert re.search(r'element_type="[ui]8"', (graph.version_dir / "model.openvino.xml").read_text())
        assert not list(graph.version_dir.glob("*.int8.*"))  # the INT8 IR took the FP32 one's place
    openvino_int8 = tmp_path / "esm2nv" / "1" / "model.openvino.xml"
    assert embeddings_cosine_to_transformers(checkpoint, openvino_int8, Runtime.OPENVINO) >= MIN_COSINE


@pytest.mark.e2e
def test_a_graph_that_fails_the_gate_is_served_in_fp32_and_the_report_says_by_how_much(
    outlier_checkpoint: Path, tmp_path: Path
) -> None:
    report = export_model(tiny("esm2nv"), outlier_checkpoint, tmp_path, runtimes=[], precision=Precision.INT8)
    encoder = report.graphs[0]
    assert encoder.triton_name == "esm2nv" and encoder.precision is Precision.FP32
    assert not encoder.int8_gate.passed
    (cosine,) = encoder.int8_gate.figures
    assert cosine.value < MIN_COSINE
    assert f"INT8 gate failed: FP32 served instead (embeddings cosine (worst) {cosine.value:.5f} < 0.999" in report.summary()
    assert not operators(encoder.version_dir / "model.onnx") & QUANTIZED_OPS
    assert read_exports(tmp_path / "esm2nv")[0] == {1: ExportRecord(outlier_checkpoint.name, Precision.FP32)}
    config = text_format.Parse((tmp_path / "esm2nv" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert "FP32" in config.parameters["exports"].string_value
    assert encoder.parity.max_abs_diff < 1e-4  # the FP32 graph it serves still matches torch
    assert embeddings_cosine_to_transformers(outlier_checkpoint, encoder.version_dir / "model.onnx") > 0.99999


@pytest.mark.e2e
def test_a_graph_tries_the_recipe_its_models_other_graph_passed_with_first(
    tiny_models: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tries of a CPU without VNNI, whatever this one has: with VNNI the tiny model has one try alone.
    monkeypatch.setattr(quantize, "has_vnni", lambda: False)
    report = export_model(tiny("esm2nv"), tiny_models.checkpoint("esm2nv"), tmp_path, runtimes=[])
    fp32 = shutil.copytree(report.graphs[0].version_dir, tmp_path / "copied") / "model.onnx"  # onnx refuses hardlinks
    unsigned = Recipe(unsigned_weights=True)
    description = tiny("esm2nv")
    expected = gate_answers(description, GraphRole.ENCODER, open_engine(Runtime.ONNXRUNTIME, fp32))
    own = quantize_gated(description, GraphRole.ENCODER, fp32, tmp_path / "own.onnx", expected)
    assert own.recipe == recipes(fp32, vnni=False)[0]
    assert quantize_gated(description, GraphRole.ENCODER, fp32, tmp_path / "shared.onnx", expected, first=unsigned).recipe == unsigned
    assert operators(tmp_path / "shared.onnx") & QUANTIZED_OPS


def test_vnni_is_read_from_the_cpu_flags() -> None:
    assert has_vnni("flags : fpu avx2 avx512f avx512_vnni")
    assert has_vnni("flags : fpu avx2 avx_vnni")
    assert not has_vnni("flags : fpu avx2 fma avx512f avx512bw")


def test_a_gate_report_names_each_figure_that_failed_and_its_limit() -> None:
    report = GateReport(
        (GateFigure("scan Spearman", 0.95, 0.99, higher_is_better=True), GateFigure("ppl change", 0.002, 0.01, False)),
        Recipe(reduce_range=True, fp32_layers=(0,)),
    )
    assert not report.passed
    assert str(report) == (
        "INT8 gate failed: FP32 served instead (scan Spearman 0.95000 < 0.99; ppl change 0.00200 <= 0.01; "
        "int8 weights in 7 bits, layers 0 kept FP32)"
    )
