"""The correctness gate: an exported graph must reproduce torch on padded mixed-length batches.

It runs on the execution provider of the export's target, with the tolerance
of that target's precision, and cannot be turned off: a model that fails it
is not written. (BioNeMo's own navigator export never checked: its
verification function returned True.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import torch

from bionemo_serving.exporter.errors import OptimizerUnavailable, ParityError
from bionemo_serving.exporter.graph_inputs import GraphInputs
from bionemo_serving.model_catalog import OnnxGraph, Precision, Target
from bionemo_serving.runtimes.engines import PROVIDER_OPTIONS, Engine

TOLERANCES: dict[Precision, float] = {Precision.FP32: 1e-4, Precision.FP16: 2e-2}
"""Largest |onnxruntime - torch| accepted on hidden states and logits (both of order 1)."""

_NO_TF32 = PROVIDER_OPTIONS["CUDAExecutionProvider"]
PROVIDERS: dict[Target, list[tuple[str, dict[str, str]]]] = {
    Target.CPU: [("CPUExecutionProvider", {})],
    Target.GPU: [("CUDAExecutionProvider", _NO_TF32)],
    Target.GPU_TENSORRT: [("TensorrtExecutionProvider", {"trt_fp16_enable": "True"}), ("CUDAExecutionProvider", _NO_TF32)],
}
"""Where the gate runs each target's graphs: onnxruntime's providers as Triton's backend uses them."""


@dataclass(frozen=True)
class ParityReport:
    max_abs_diff: float
    tolerance: float
    provider: str
    batches: int
    values_compared: int


def require_providers(target: Target) -> None:
    """A clear error, before anything is loaded, where this onnxruntime cannot run `target`'s gate."""
    missing = [name for name, _ in PROVIDERS[target] if name not in onnxruntime.get_available_providers()]
    if missing:
        raise OptimizerUnavailable(
            f"--target {target.value}: this onnxruntime has no {', '.join(missing)}; verify {target.value} exports "
            f"on a GPU host with onnxruntime-gpu, or export with --target cpu (every target's config is written "
            f"either way)"
        )


def gate_session(onnx_path: Path, target: Target) -> onnxruntime.InferenceSession:
    """An onnxruntime session on `target`'s providers."""
    require_providers(target)
    providers = PROVIDERS[target]
    options: list[Any] = [dict(provider_options) for _, provider_options in providers]
    return onnxruntime.InferenceSession(str(onnx_path), providers=[name for name, _ in providers], provider_options=options)


def check_parity(
    module: torch.nn.Module,
    onnx_path: Path,
    graph: OnnxGraph,
    batches: list[GraphInputs],
    name: str,
    target: Target = Target.CPU,
    tolerance: float | None = None,
) -> ParityReport:
    """Compare onnxruntime on `target`'s providers with torch where outputs matter; raise `ParityError` past the
    tolerance (default: the one of the target's precision)."""
    session = gate_session(onnx_path, target)
    provider = session.get_providers()[0]
    inputs = [tensor.name for tensor in session.get_inputs()]
    return _held_to_torch(
        module, session.run, inputs, graph, batches, f"{name}: onnxruntime ({provider})", target.precision, tolerance, provider
    )


def check_runtime_parity(
    module: torch.nn.Module,
    engine: Engine,
    inputs: list[str],
    graph: OnnxGraph,
    batches: list[GraphInputs],
    label: str,
    tolerance: float | None = None,
) -> ParityReport:
    """The same gate for a CPU runtime's engine (bionemo_serving/runtimes/engines.py), at FP32, on one thread."""
    return _held_to_torch(
        module, lambda outputs, feeds: engine.run(outputs, feeds, 1), inputs, graph, batches, label, Precision.FP32,
        tolerance, "CPU",
    )  # fmt: skip


def torch_answers(
    module: torch.nn.Module, inputs: list[str], batch: GraphInputs, outputs: int
) -> list[np.ndarray]:
    """The torch module's outputs for a gate batch; `inputs` in the graph's order (torch takes them positionally)."""
    with torch.inference_mode():
        answers = module(*(torch.from_numpy(batch.feeds[name]) for name in inputs))
    return [answer.numpy() for answer in (answers if outputs > 1 else (answers,))]


def _held_to_torch(
    module: torch.nn.Module,
    run: Callable[[list[str], dict[str, np.ndarray]], list[np.ndarray]],
    inputs: list[str],
    graph: OnnxGraph,
    batches: list[GraphInputs],
    label: str,
    precision: Precision,
    tolerance: float | None,
    provider: str,
) -> ParityReport:
    """The largest difference of `run` from torch over `batches`; `ParityError` naming `label` past the tolerance.

    `inputs` are the graph's inputs in order: torch takes them positionally (per-layer inputs have no parameter names).
    """
    tolerance = TOLERANCES[precision] if tolerance is None else tolerance
    worst, compared = 0.0, 0
    outputs = [spec.name for spec in graph.outputs]
    for batch in batches:
        exported = run(outputs, batch.feeds)
        references = torch_answers(module, inputs, batch, len(outputs))
        for output_name, output, reference in zip(outputs, exported, references):
            where = batch.compared.get(output_name, np.ones(output.shape[:1], dtype=bool))
            difference = np.abs(output[where] - reference[where])
            worst, compared = max(worst, float(difference.max())), compared + difference.size
    if not worst <= tolerance:
        raise ParityError(
            f"{label} differs from torch by {worst:.3g} (tolerance {tolerance:.1g}, {precision.value}) on padded "
            f"batches of mixed lengths; the model was not written"
        )
    return ParityReport(worst, tolerance, provider, len(batches), compared)
