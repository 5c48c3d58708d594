"""`--optimizer navigator`: Triton Model Navigator's `nav.torch.optimize` in place of the built-in trace.

Navigator exports, converts, checks and profiles the formats it is given and
names the fastest one that passed its own correctness check. It is asked only
for the formats the generated configs serve (ONNX, which the gpu-tensorrt
target hands to TensorRT inside onnxruntime); the export's own parity gate then
checks its result like any other.

Navigator is an optional extra: its package requires `tensorrt`, which does not
install on CPU hosts. `make install` installs it with `--no-deps` and the CPU
dependencies of requirements/navigator-cpu.txt.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import torch

from bionemo_serving.exporter.errors import ExportError, OptimizerUnavailable
from bionemo_serving.exporter.graph_inputs import GraphInputs
from bionemo_serving.exporter.onnx_export import ONNX_OPSET, dynamic_axes, input_names
from bionemo_serving.model_catalog import OnnxGraph, Target

MISSING = (
    "--optimizer navigator needs Triton Model Navigator, which is not installed in this environment: "
    "on a GPU host `pip install 'bionemo-serving[navigator]'` (it pulls TensorRT); on a CPU host "
    "`pip install --no-deps -r requirements/navigator-cpu.txt` (what `make install` does). "
    "Or export with --optimizer builtin."
)


ONNX_RUNNERS = ("OnnxCPU", "OnnxCUDA", "OnnxTensorRT")
"""The runners Navigator checks and profiles, of which it keeps those of the target's device: the ONNX file is all the
export takes, and its default runners add torch's own, torch.compile among them, whose compilation took 68 s of a
cold machine's 128 s for two tiny graphs (tests/e2e/test_exporter_cli_e2e.py, AMD EPYC, 2026-11-27)."""


def navigator_version() -> str:
    """The installed Model Navigator's version; `OptimizerUnavailable` where there is none."""
    # Navigator converts in spawned child processes and refuses to import once the start method is fork,
    # which any library that merely asked for the default context (transformers' save_pretrained does) fixes.
    multiprocessing.set_start_method("spawn", force=True)
    try:
        import model_navigator
    except ImportError as error:
        raise OptimizerUnavailable(MISSING) from error
    return model_navigator.__version__


def optimize_with_navigator(
    module: torch.nn.Module,
    graph: OnnxGraph,
    samples: list[GraphInputs],
    target: Target,
    max_batch_size: int,
    workspace: Path,
) -> Path:
    """Run `nav.torch.optimize` on `module` in `workspace`; return the best ONNX file it produced.

    `samples` are padded batches of mixed lengths, so that Navigator sees every
    dynamic axis vary; it profiles batch sizes up to `max_batch_size`.
    """
    navigator_version()
    import model_navigator as nav
    from model_navigator.exceptions import ModelNavigatorError
    from model_navigator.inplace.registry import module_registry

    # Navigator 0.14's report writer keeps every workspace an `optimize` ever used and writes into each at the end
    # of the next: a model's second graph failed on the first one's removed workspace. Clearing the (inplace)
    # module registry, which this export does not use, is what resets that list.
    module_registry.clear()

    inputs, outputs = input_names(graph, samples[0]), [spec.name for spec in graph.outputs]
    package = nav.torch.optimize(
        module,
        dataloader=[tuple(torch.from_numpy(sample.feeds[name]) for name in inputs) for sample in samples],
        sample_count=len(samples),
        input_names=tuple(inputs),
        output_names=tuple(outputs),
        target_formats=(nav.Format.ONNX,),
        target_device=nav.DeviceKind.CPU if target is Target.CPU else nav.DeviceKind.CUDA,
        workspace=workspace,
        custom_configs=[nav.OnnxConfig(opset=ONNX_OPSET, dynamic_axes=dynamic_axes(graph, inputs + outputs))],
        optimization_profile=nav.OptimizationProfile(max_batch_size=max_batch_size),
        runners=ONNX_RUNNERS,
    )
    try:
        best = package.get_best_model_status(include_source=False)
    except ModelNavigatorError as error:
        outcomes = {
            key: {runner: dict(status.status) for runner, status in model.runners_status.items()}
            for key, model in package.status.models_status.items()
        }
        raise ExportError(f"Triton Model Navigator produced no working ONNX model: {outcomes}") from error
    return package.get_model_path(best.model_config.key)
