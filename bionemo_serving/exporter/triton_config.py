"""Generate a graph's configs, one per target, from its model description through Triton's ModelConfig protobuf.

The ONNX files are the same for every target: `config.pbtxt` (cpu) runs them in
the python backend with onnxruntime, `configs/gpu.pbtxt` and `configs/gpu-tensorrt.pbtxt`
a stateless graph in Triton's native onnxruntime backend, picked by `--model-config-name`.
A stateful graph (the incremental decoder) keeps the python backend everywhere, in one
instance with every thread the description gives its model, and no Triton batching:
its rows are batched by the service.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from bionemo_serving.model_catalog import (
    EXPORTS_PARAMETER,
    TRITON_CALL_TIMEOUT_S,
    CallPriority,
    ExportRecord,
    GraphSpec,
    ModelDescription,
    Target,
    recorded_exports,
)
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.runtimes.choice import (
    GENERATIONS,
    MAX_TOKENS_PARAMETER,
    MODEL_PARAMETER,
    TIMING_PARAMETER,
    TOKEN_BATCHES,
)
from bionemo_serving.runtimes.engines import PROVIDER_OPTIONS


def config_path(target: Target) -> str:
    """Where a target's config lives in the model's folder; tritonserver's `--model-config-name` picks it."""
    return "config.pbtxt" if target is Target.CPU else f"configs/{target.value}.pbtxt"


def _resolve(dims: tuple[int | str, ...], sizes: dict[str, int]) -> list[int]:
    return [sizes[dim] if isinstance(dim, str) else dim for dim in dims]


def build_config(
    description: ModelDescription,
    graph: GraphSpec,
    sizes: dict[str, int],
    target: Target = Target.CPU,
    checkpoint: str | None = None,
    exports: Mapping[int, ExportRecord] | None = None,
) -> model_config_pb2.ModelConfig:
    """The config of one graph for one target.

    `sizes` gives the checkpoint's sizes that tensor dimensions name, such as hidden_size. `checkpoint` says where
    the weights came from (model_catalog.RANDOM_INIT_WEIGHTS, or the checkpoint's file or folder name): recorded as
    the parameter `checkpoint`, which GET /models shows; None records nothing. `exports` records each version's
    checkpoint and precision (model_catalog.EXPORTS_PARAMETER).
    """
    batching = description.batching
    python_backend = target is Target.CPU or graph.stateful
    config = model_config_pb2.ModelConfig(
        name=description.triton_name(graph.role),
        backend="python" if python_backend else "onnxruntime",
        max_batch_size=0 if graph.stateful else batching.max_batch_size,
    )
    for specs, tensors in ((graph.inputs, config.input), (graph.outputs, config.output)):
        for spec in specs:
            tensors.add(
                name=spec.name,
                data_type=model_config_pb2.DataType.Value(spec.data_type),
                dims=_resolve(spec.dims, sizes),
            )
    kind = model_config_pb2.ModelInstanceGroup.KIND_CPU if target is Target.CPU else model_config_pb2.ModelInstanceGroup.KIND_GPU
    config.instance_group.add(kind=kind, count=1 if graph.stateful else graph.instances or batching.instance_count)
    if not graph.stateful:
        config.dynamic_batching.preferred_batch_size.extend(batching.preferred_batch_sizes)
        config.dynamic_batching.max_queue_delay_microseconds = batching.max_queue_delay_microseconds
        abandoned = config.dynamic_batching.default_queue_policy  # waited as long as the client does: dropped
        abandoned.timeout_action = model_config_pb2.ModelQueuePolicy.REJECT
        abandoned.default_timeout_microseconds = TRITON_CALL_TIMEOUT_S * 1_000_000
        config.dynamic_batching.priority_levels = max(CallPriority)
        config.dynamic_batching.default_priority_level = CallPriority.SHARED
    config.version_policy.latest.num_versions = description.versions_served
    if description.response_cache and not graph.stateful:  # a stateful model's answer depends on its caches
        config.response_cache.enable = True
    if python_backend:
        # Read by the backend (bionemo_serving/runtimes/backends/<backend>.py).
        for part in graph.onnx_graphs:
            config.parameters[f"{part.name}_file"].string_value = part.file
        threads = batching.intra_op_threads * (batching.instance_count if graph.stateful else 1)
        config.parameters["intra_op_threads"].string_value = str(threads)
        # onnxruntime's provider in the python backend: TensorRT is left to the native backend's configs.
        provider = "CPUExecutionProvider" if target is Target.CPU else "CUDAExecutionProvider"
        config.parameters["execution_provider"].string_value = provider
        config.parameters["arena"].string_value = graph.arena.value
        config.parameters[MODEL_PARAMETER].string_value = description.name
    else:
        config.default_model_filename = graph.onnx_graphs[0].file
    if not python_backend:
        accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
        if target is Target.GPU_TENSORRT:
            accelerators.add(name="tensorrt").parameters["precision_mode"] = target.precision.value
        # Triton's onnxruntime backend hands a "cuda" accelerator's parameters to onnxruntime's CUDA provider (for
        # gpu-tensorrt, the nodes TensorRT leaves to it): the options the gate and the python backend use.
        accelerators.add(name="cuda").parameters.update(PROVIDER_OPTIONS["CUDAExecutionProvider"])
    for size in graph.config_sizes:
        config.parameters[size].string_value = str(sizes[size])
    if checkpoint is not None:
        config.parameters["checkpoint"].string_value = checkpoint
    if exports:
        recorded = {str(version): exports[version].as_json() for version in sorted(exports)}
        config.parameters[EXPORTS_PARAMETER].string_value = json.dumps(recorded)
    if graph.stateful:
        config.parameters["idle_seconds"].string_value = str(batching.cache_idle_seconds)
    elif python_backend:
        config.parameters["attention_budget"].string_value = str(batching.attention_budget)
    if target is Target.CPU and graph.timed:  # what the runtime choice times (bionemo_serving/runtimes/choice.py)
        config.parameters[TIMING_PARAMETER].string_value = GENERATIONS if graph.stateful else TOKEN_BATCHES
        if not graph.stateful:
            config.parameters[MAX_TOKENS_PARAMETER].string_value = str(tokenizer_for(description).max_model_tokens)
    return config


def render_config(
    description: ModelDescription,
    graph: GraphSpec,
    sizes: dict[str, int],
    target: Target = Target.CPU,
    checkpoint: str | None = None,
    exports: Mapping[int, ExportRecord] | None = None,
) -> str:
    """Config text with a header documenting each tensor; the backend and the service read dtypes from it."""
    header = [
        (
            f"# {description.triton_name(graph.role)}: the {graph.role.value} of {description.name}, "
            f"target {target.value}. {description.summary}"
        ),
        "# Generated by `python -m bionemo_serving.exporter` from bionemo_serving/model_catalog.py; "
        "edit the description, not this file.",
        (
            "# Whole shapes below (max_batch_size 0: the service batches rows). Tensors:"
            if graph.stateful
            else "# Shapes below omit the batch axis (max_batch_size > 0). Tensors:"
        ),
    ]
    batch_axis = [] if graph.stateful else ["batch"]
    for direction, specs in (("input", graph.inputs), ("output", graph.outputs)):
        for spec in specs:
            dims = ", ".join(batch_axis + [str(d) for d in _resolve(spec.dims, sizes)])
            header.append(f"#   {direction:6} {spec.name} {spec.data_type} [{dims}]: {spec.doc}")
    return "\n".join(header) + "\n\n" + text_format.MessageToString(
        build_config(description, graph, sizes, target, checkpoint, exports)
    )


def read_exports(model_dir: Path) -> tuple[dict[int, ExportRecord], str | None]:
    """What the CPU config in `model_dir` records: each version's export (model_catalog.EXPORTS_PARAMETER), and the
    parameter `checkpoint` (all that a config written before EXPORTS_PARAMETER says). Nothing for a folder with no
    readable config."""
    try:
        config = text_format.Parse((model_dir / config_path(Target.CPU)).read_text(), model_config_pb2.ModelConfig())
    except (OSError, text_format.ParseError):
        return {}, None
    checkpoint = config.parameters["checkpoint"].string_value if "checkpoint" in config.parameters else None
    return recorded_exports(config.parameters), checkpoint


def recorded_checkpoint(model_dir: Path, version: int) -> str | None:
    """Where `version` of the graph in `model_dir` came from, as its config records it; None where it does not say."""
    exports, checkpoint = read_exports(model_dir)
    if exports:
        return exports[version].checkpoint if version in exports else None
    return checkpoint
