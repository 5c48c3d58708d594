"""Trace one graph into ONNX with every variable dimension dynamic; weights past protobuf's 2 GB go beside it."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import onnx
import torch
from onnx.external_data_helper import uses_external_data

from bionemo_serving.exporter.graph_inputs import GraphInputs
from bionemo_serving.model_catalog import OnnxGraph

ONNX_OPSET = 17
EXTERNAL_DATA_SUFFIX = ".data"


def external_data_path(path: Path) -> Path:
    """Where the weights of `path` live when they are stored as ONNX external data (one file)."""
    return path.with_name(path.name + EXTERNAL_DATA_SUFFIX)


def input_names(graph: OnnxGraph, sample: GraphInputs) -> list[str]:
    """The graph's inputs in order, a per-layer one once per layer of the sample."""
    return [name for spec in graph.inputs for name in sample.feeds if graph.spec(name) is spec]


def dynamic_axes(graph: OnnxGraph, names: list[str]) -> dict[str, dict[int, str]]:
    """The batch axis and every -1 dimension of each tensor `names` lists, named for the ONNX graph."""
    return {
        name: {0: "batch", **{axis + 1: f"{name}_{axis}" for axis, dim in enumerate(graph.spec(name).dims) if dim == -1}}
        for name in names
    }


def export_onnx(
    module: torch.nn.Module, graph: OnnxGraph, sample: GraphInputs, path: Path, external_data: bool = False
) -> None:
    """Write `module` to `path` with the legacy (TorchScript) exporter, which matched torch best."""
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".trace-") as scratch:
        traced = Path(scratch) / path.name
        _trace(module, graph, sample, traced)
        install_onnx(traced, path, external_data)


def install_onnx(source: Path, path: Path, external_data: bool = False) -> None:
    """Copy the ONNX model at `source` to `path`, its weights inline or in one `<path>.data` file.

    A model over protobuf's 2 GB limit (ProtT5-XL, ESM-2 3B) comes with its
    weights outside the graph, often one file per tensor; those, or every model
    when `external_data` is set, are gathered into one `<path>.data` file that
    onnxruntime and Triton read from the same folder.
    """
    header = onnx.load(str(source), load_external_data=False)
    if not external_data and not any(uses_external_data(tensor) for tensor in header.graph.initializer):
        shutil.copyfile(source, path)
        return
    onnx.save_model(
        onnx.load(str(source)),  # also reads the weights stored beside the graph
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=external_data_path(path).name,
        size_threshold=0,
    )
    external_data_path(path).chmod(0o644)  # onnx writes it private; Triton may run as another user


def _trace(module: torch.nn.Module, graph: OnnxGraph, sample: GraphInputs, path: Path) -> None:
    # The tracer warns about Python branches on shapes; the parity gate, run on
    # other batch sizes and lengths than the trace, is what proves the graph general.
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inputs, outputs = input_names(graph, sample), [spec.name for spec in graph.outputs]
        torch.onnx.export(
            module,
            tuple(torch.from_numpy(sample.feeds[name]) for name in inputs),
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=dynamic_axes(graph, inputs + outputs),
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
