"""Trace a wrapped checkpoint into ONNX with dynamic batch and sequence axes."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from model_catalog import ModelDescription
from preprocessing import tokenizer_for

ONNX_OPSET = 17


def export_onnx(module: torch.nn.Module, description: ModelDescription, path: Path) -> None:
    """Write `module` to `path` with the legacy (TorchScript) exporter, which matched torch best."""
    sample = tokenizer_for(description).batch(["MKTAYIAKQR", "MSLK"])
    dynamic_axes = {spec.name: {0: "batch", 1: "sequence"} for spec in description.inputs + description.outputs}
    # The tracer warns about Python branches on shapes; the parity gate, run on
    # other batch sizes and lengths than the trace, is what proves the graph general.
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(torch.from_numpy(sample.model_inputs()[spec.name]) for spec in description.inputs),
            str(path),
            input_names=[spec.name for spec in description.inputs],
            output_names=[spec.name for spec in description.outputs],
            dynamic_axes=dynamic_axes,
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
