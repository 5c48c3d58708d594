"""Write a graph once more for each CPU runtime that fuses attention, beside its ONNX files.

`model.onnx`, which every target serves, computes attention as separate MatMul,
Add, Softmax, MatMul ops over [rows, heads, L, L]: on an Intel Xeon (AVX-512)
1.7-2.2x slower than torch's fused scaled-dot-product attention on 8 proteins of
272-512 residues, the further behind the longer the proteins. The exporter runs
the module under sdpa for these conversions, which each turn into a fused kernel:
onnxruntime's MultiHeadAttention (bionemo_serving/exporter/fused_attention.py), torch's own
(TorchScript), OpenVINO's ScaledDotProductAttention. Each file is held to the
same parity gate as the ONNX file; `bionemo_serving.runtimes.choice` then times them on
the machine that serves (bionemo_serving/runtimes/engines.py runs them).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from bionemo_serving.exporter.fused_attention import export_fused_attention_onnx
from bionemo_serving.exporter.graph_inputs import GraphInputs
from bionemo_serving.exporter.onnx_export import external_data_path, input_names
from bionemo_serving.model_catalog import OnnxGraph
from bionemo_serving.runtimes.engines import TORCHSCRIPT_NAMES, Runtime

Converter = Callable[[torch.nn.Module, OnnxGraph, GraphInputs, Path, bool], None]
"""(module, graph, sample, path, external_data): external_data asks an ONNX file to keep its weights beside it
(over protobuf's 2 GB); TorchScript and OpenVINO's IR have no such limit and ignore it."""


def export_torchscript(
    module: torch.nn.Module, graph: OnnxGraph, sample: GraphInputs, path: Path, external_data: bool = False
) -> None:
    """The traced module, frozen (only the weights it uses: the decoder's parts hold the whole seq2seq model), with its
    tensors' names in an extra file (a trace keeps none)."""
    inputs = input_names(graph, sample)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # shape branches: the parity gate, on other shapes, proves the trace general
        example = tuple(torch.from_numpy(sample.feeds[name]) for name in inputs)
        traced = torch.jit.freeze(torch.jit.trace(module, example, check_trace=False).eval())
    names = json.dumps({"inputs": inputs, "outputs": [spec.name for spec in graph.outputs]})
    torch.jit.save(traced, str(path), _extra_files={TORCHSCRIPT_NAMES: names})


def export_openvino(
    module: torch.nn.Module, graph: OnnxGraph, sample: GraphInputs, path: Path, external_data: bool = False
) -> None:
    """OpenVINO's IR (`<graph>.openvino.xml` and `.bin`) converted from torch, whose sdpa becomes its fused
    ScaledDotProductAttention (from the ONNX file it would not: OpenVINO keeps the separate ops there)."""
    import openvino

    inputs = input_names(graph, sample)
    # Every axis dynamic, of the sample's type: the decoder step's masks and token ids are int64, its caches float32.
    shapes = [([-1] * sample.feeds[name].ndim, openvino.Type(sample.feeds[name].dtype)) for name in inputs]
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = openvino.convert_model(
            module, example_input=tuple(torch.from_numpy(sample.feeds[name]) for name in inputs), input=shapes
        )
    # Named in order: a forward's parameters do not name the decoder step's per-layer caches (`*caches`).
    for tensor, name in zip([*model.inputs, *model.outputs], [*inputs, *(spec.name for spec in graph.outputs)]):
        tensor.get_tensor().set_names({name})
    # Weights stay float32: OpenVINO's default halves them, which alone differs from torch by ~3e-3.
    openvino.save_model(model, str(path), compress_to_fp16=False)


def written_files(runtime: Runtime, graph: OnnxGraph, folder: Path) -> list[Path]:
    """Every file the runtime's conversion of `graph` leaves in `folder`."""
    main = folder / runtime.file(graph.name)
    beside = {Runtime.OPENVINO: main.with_suffix(".bin"), Runtime.ONNXRUNTIME_FUSED: external_data_path(main)}
    return [main, beside[runtime]] if runtime in beside else [main]


CONVERTERS: dict[Runtime, Converter] = {
    Runtime.ONNXRUNTIME_FUSED: export_fused_attention_onnx,
    Runtime.TORCHSCRIPT: export_torchscript,
    Runtime.OPENVINO: export_openvino,
}
"""The runtimes written beside the ONNX file, where their library is installed for the export."""
