"""Trace one graph into ONNX with every variable dimension dynamic; weights past protobuf's 2 GB go beside it."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import onnx
import torch

from exporter.graph_inputs import GraphInputs
from model_catalog import GraphSpec

ONNX_OPSET = 17
EXTERNAL_DATA_SUFFIX = ".data"


def external_data_path(path: Path) -> Path:
    """Where the weights of `path` live when they are stored as ONNX external data (one file)."""
    return path.with_name(path.name + EXTERNAL_DATA_SUFFIX)


def export_onnx(
    module: torch.nn.Module, graph: GraphSpec, sample: GraphInputs, path: Path, external_data: bool = False
) -> None:
    """Write `module` to `path` with the legacy (TorchScript) exporter, which matched torch best.

    A model over protobuf's 2 GB limit (ProtT5-XL, ESM-2 3B) makes the exporter
    write every weight as a file of its own beside the graph; those, or every
    model when `external_data` is set, are gathered into one `<path>.data` file
    that onnxruntime and Triton read from the same folder.
    """
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".trace-") as scratch:
        traced = Path(scratch) / path.name
        _trace(module, graph, sample, traced)
        if not external_data and list(Path(scratch).iterdir()) == [traced]:
            traced.rename(path)
            return
        onnx.save_model(
            onnx.load(str(traced)),  # also reads the weights the exporter wrote beside the graph
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=external_data_path(path).name,
            size_threshold=0,
        )
        external_data_path(path).chmod(0o644)  # onnx writes it private; Triton may run as another user


def _trace(module: torch.nn.Module, graph: GraphSpec, sample: GraphInputs, path: Path) -> None:
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
