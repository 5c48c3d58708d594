"""The fused-attention export: every encoder's attention as one MultiHeadAttention node, within the FP32 gate."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx
import pytest
import torch

from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.errors import ExportError
from bionemo_serving.exporter.exportable import ExportableModel
from bionemo_serving.exporter.fused_attention import export_fused_attention_onnx
from bionemo_serving.exporter.graph_inputs import trace_inputs, verification_inputs
from bionemo_serving.exporter.onnx_export import export_onnx
from bionemo_serving.exporter.pipeline import GATE_SEED
from bionemo_serving.exporter.verify import TOLERANCES, check_parity
from bionemo_serving.model_catalog import GraphRole, ModelDescription, Precision
from support.checkpoints import TINY_SIZES, TinyModels, tiny


def _encoder(
    name: str, tiny_models: TinyModels, attention: str
) -> tuple[ModelDescription, ExportableModel, torch.nn.Module]:
    """The tiny checkpoint of `name`'s architecture loaded with `attention`: description, model, encoder graph."""
    description = tiny(name)
    loaded = load_for_export(description, tiny_models.checkpoint(name), attention=attention)
    return description, loaded, loaded.graphs[GraphRole.ENCODER]


def _ops(path: Path) -> Counter[str]:
    return Counter(node.op_type for node in onnx.load(str(path)).graph.node)


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(TINY_SIZES))
def test_every_encoder_exports_fused_within_the_fp32_gate(name: str, tiny_models: TinyModels, tmp_path: Path) -> None:
    description, loaded, module = _encoder(name, tiny_models, "sdpa")
    graph = description.graph(GraphRole.ENCODER).onnx_graphs[0]
    path = tmp_path / "model.onnx"
    export_fused_attention_onnx(module, graph, trace_inputs(description, GraphRole.ENCODER, loaded.graphs), path)
    ops = _ops(path)
    assert ops["MultiHeadAttention"] == module.encoder.config.num_hidden_layers and ops["Softmax"] == 0
    batches = verification_inputs(description, GraphRole.ENCODER, loaded.graphs, GATE_SEED)
    report = check_parity(module, path, graph, batches, name)  # raises past the tolerance
    assert report.max_abs_diff <= TOLERANCES[Precision.FP32] and report.batches == len(batches)


def test_eager_attention_is_refused_and_nothing_is_left(tiny_models: TinyModels, tmp_path: Path) -> None:
    """T5 loads with eager attention by default: nothing to fuse, and an unfused graph must not pass for a fused one."""
    description, loaded, module = _encoder("prott5nv", tiny_models, "eager")
    graph = description.graph(GraphRole.ENCODER).onnx_graphs[0]
    sample = trace_inputs(description, GraphRole.ENCODER, loaded.graphs)
    with pytest.raises(ExportError, match="attention='sdpa'"):
        export_fused_attention_onnx(module, graph, sample, tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.e2e
def test_the_plain_export_is_unfused_again_afterwards(tiny_models: TinyModels, tmp_path: Path) -> None:
    """The MultiHeadAttention symbolic holds only while the fused export traces."""
    description, loaded, module = _encoder("esm2nv", tiny_models, "sdpa")
    graph = description.graph(GraphRole.ENCODER).onnx_graphs[0]
    sample = trace_inputs(description, GraphRole.ENCODER, loaded.graphs)
    export_fused_attention_onnx(module, graph, sample, tmp_path / "fused.onnx")
    export_onnx(module, graph, sample, tmp_path / "plain.onnx")
    ops = _ops(tmp_path / "plain.onnx")
    assert ops["Softmax"] == module.encoder.config.num_hidden_layers and ops["MultiHeadAttention"] == 0
