"""Trace one graph into ONNX with every variable dimension dynamic."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from exporter.graph_inputs import GraphInputs
from model_catalog import GraphSpec

ONNX_OPSET = 17


def export_onnx(module: torch.nn.Module, graph: GraphSpec, sample: GraphInputs, path: Path) -> None:
    """Write `module` to `path` with the legacy (TorchScript) exporter, which matched torch best."""
    dynamic_axes = {
        spec.name: {0: "batch", **{axis + 1: f"{spec.name}_{axis}" for axis, dim in enumerate(spec.dims) if dim == -1}}
        for spec in graph.inputs + graph.outputs
    }
    # The tracer warns about Python branches on shapes; the parity gate, run on
    # other batch sizes and lengths than the trace, is what proves the graph general.
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(torch.from_numpy(sample.feeds[spec.name]) for spec in graph.inputs),
            str(path),
            input_names=[spec.name for spec in graph.inputs],
            output_names=[spec.name for spec in graph.outputs],
            dynamic_axes=dynamic_axes,
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
