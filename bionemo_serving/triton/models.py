"""Served models as the service sees them: what Triton has loaded, with tensors, dtypes and sizes from its configs.

Triton is asked, not the repository folder: it may be remote (s3://), and with
explicit model control only some of its models are loaded.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import tritonclient.http.aio as triton_http
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import triton_to_np_dtype

from bionemo_serving.model_catalog import (
    MODELS,
    RANDOM_INIT_WEIGHTS,
    Capability,
    ExportRecord,
    GraphRole,
    GraphSpec,
    ModelDescription,
    Precision,
    recorded_exports,
)
from bionemo_serving.runtimes.record import RuntimeRecord


@dataclass(frozen=True)
class TritonTensor:
    name: str
    datatype: str
    """Triton's wire name, e.g. INT64."""

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(triton_to_np_dtype(self.datatype))


@dataclass(frozen=True)
class TritonGraph:
    """One Triton model: the name the runner calls and its inputs in config order."""

    name: str
    spec: GraphSpec
    inputs: tuple[TritonTensor, ...]
    max_batch_size: int
    config: model_config_pb2.ModelConfig

    @classmethod
    def from_config(cls, spec: GraphSpec, config: model_config_pb2.ModelConfig) -> TritonGraph:
        inputs = tuple(
            TritonTensor(tensor.name, model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_"))
            for tensor in config.input
        )
        return cls(config.name, spec, inputs, config.max_batch_size, config)

    def infer_inputs(self, arrays: dict[str, np.ndarray]) -> list[triton_http.InferInput]:
        """One InferInput per config input, in config order, cast to the config's dtype, sent as binary."""
        infer_inputs = []
        for tensor in self.inputs:
            array = arrays[tensor.name].astype(tensor.numpy_dtype, copy=False)
            infer_input = triton_http.InferInput(tensor.name, list(array.shape), tensor.datatype)
            infer_input.set_data_from_numpy(array, binary_data=True)
            infer_inputs.append(infer_input)
        return infer_inputs

    @cached_property
    def runtime(self) -> RuntimeRecord:
        """The runtime the config records (runtimes.choice) and its timings; onnxruntime where none is. Read once:
        every score request's time estimate reads it (bionemo_serving/engine/cost.py)."""
        return RuntimeRecord.from_parameters(self.name, self.config.parameters)

    def checkpoint(self) -> str | None:
        """Where the graph's weights came from, as its export recorded it (config parameter `checkpoint`):
        model_catalog.RANDOM_INIT_WEIGHTS or the checkpoint's file or folder name; None for a config without it."""
        parameters = self.config.parameters
        return parameters["checkpoint"].string_value if "checkpoint" in parameters else None

    def precision(self, version: int) -> str:
        """What the graph runs in at `version`, as its export recorded it (model_catalog.EXPORTS_PARAMETER); FP32
        for an export made before it recorded precision (none had another)."""
        record = self._exports.get(version)
        return (record.precision if record else Precision.FP32).value

    @cached_property
    def _exports(self) -> dict[int, ExportRecord]:
        """Read once from the config: every answer names its precision."""
        return recorded_exports(self.config.parameters)

    def sizes(self) -> dict[str, int]:
        """The checkpoint sizes the description's output dimensions name, e.g. hidden_size, and those the config
        records as parameters (model_catalog.GraphSpec.config_sizes), as exported."""
        dims_by_name = {tensor.name: list(tensor.dims) for tensor in self.config.output}
        from_dims = {
            dim: size
            for spec in self.spec.outputs
            for dim, size in zip(spec.dims, dims_by_name[spec.name])
            if isinstance(dim, str)
        }
        return from_dims | {size: int(self.config.parameters[size].string_value) for size in self.spec.config_sizes}


@dataclass(frozen=True)
class ServedModel:
    """A catalogued model whose every required graph Triton has loaded, at the version a request uses; with the
    optional graphs (heads) that are loaded at all of its versions."""

    description: ModelDescription
    versions: tuple[int, ...]
    """Every version loaded for all of the model's required graphs, oldest first."""
    graphs: dict[GraphRole, TritonGraph]
    sizes: dict[str, int]
    version: int
    """The version requests go to: the newest unless one asks for another."""
    unserved: dict[GraphRole, str] = field(default_factory=dict)
    """Why each optional graph that is not in `graphs` is not: what a request for its capabilities is told."""

    @property
    def name(self) -> str:
        return self.description.name

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What the loaded graphs can answer."""
        return frozenset().union(*(graph.spec.capabilities for graph in self.graphs.values()))

    @property
    def weights(self) -> str | None:
        """Where the served weights came from, from its first graph's config (the encoder's; a model's graphs are
        exported together): the default's own record (`random-init default`, or weights trained here and their card),
        `checkpoint: <name>`, or None where the config records nothing."""
        checkpoint = next(iter(self.graphs.values())).checkpoint()
        if checkpoint is None:
            return None
        return checkpoint if checkpoint in (RANDOM_INIT_WEIGHTS, self.description.default_weights) else f"checkpoint: {checkpoint}"

    def graph(self, role: GraphRole) -> TritonGraph:
        return self.graphs[role]

    def precision(self, role: GraphRole) -> str:
        """What the model's `role` graph runs in at the version requests go to."""
        return self.graphs[role].precision(self.version)

    def at_version(self, version: int) -> ServedModel:
        return replace(self, version=version)


async def discover_models(runner: Any) -> dict[str, ServedModel]:
    """Every catalogued model whose required graphs are all READY in Triton, with the configs Triton loaded.

    `runner` is the bentoml Triton runner; its client methods are tritonclient's (HTTP, asyncio).
    """
    entries = await runner.get_model_repository_index()
    index = {entry["name"]: entry for entry in entries}
    ready: dict[str, set[int]] = defaultdict(set)
    for entry in entries:
        if entry.get("state") == "READY":
            ready[entry["name"]].add(int(entry["version"]))
    served = {}
    for description in MODELS.values():
        required = [graph for graph in description.graphs if not graph.optional]
        versions = tuple(sorted(set.intersection(*(ready[description.triton_name(graph.role)] for graph in required))))
        if not versions:
            continue
        unserved = {
            graph.role: why
            for graph in description.graphs
            if graph.optional and (why := _why_unserved(description.triton_name(graph.role), versions, index, ready))
        }
        names = {
            graph.role: description.triton_name(graph.role) for graph in description.graphs if graph.role not in unserved
        }
        configs = await asyncio.gather(*(runner.get_model_config(name) for name in names.values()))
        graphs = {
            role: TritonGraph.from_config(
                description.graph(role),
                json_format.ParseDict(config, model_config_pb2.ModelConfig(), ignore_unknown_fields=True),
            )
            for role, config in zip(names, configs)
        }
        sizes = {key: value for graph in graphs.values() for key, value in graph.sizes().items()}
        served[description.name] = ServedModel(description, versions, graphs, sizes, versions[-1], unserved)
    return served


def _why_unserved(name: str, versions: tuple[int, ...], index: dict[str, dict], ready: dict[str, set[int]]) -> str:
    """Why the optional graph `name` cannot serve every one of `versions`; empty where it can."""
    if name not in index:
        return f"its checkpoint has no head for it (the model repository has no {name})"
    if not ready[name]:
        entry = index[name]
        because = f": {entry['reason']}" if entry.get("reason") else ""
        return f"{name} is not loaded (Triton: {entry.get('state', 'not loaded')}{because})"
    lacking = sorted(set(versions) - ready[name])
    if lacking:
        return f"{name} is not loaded at version {', '.join(map(str, lacking))}"
    return ""
