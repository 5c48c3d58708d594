"""Served models as the service sees them: what Triton has loaded, with tensors, dtypes and sizes from its configs.

Triton is asked, not the repository folder: it may be remote (s3://), and with
explicit model control only some of its models are loaded.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import tritonclient.http.aio as triton_http
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import triton_to_np_dtype

from model_catalog import MODELS, GraphRole, GraphSpec, ModelDescription
from serving.protocol import GraphRuntime


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

    def runtime(self) -> GraphRuntime:
        """The runtime the config records (serving.startup.runtime_choice) and its timings; onnxruntime where none is."""
        parameters = self.config.parameters
        if "runtime" not in parameters:
            return GraphRuntime(triton_model=self.name, runtime="onnxruntime", chosen_by="default")
        timings = json.loads(parameters["runtime_timings"].string_value)
        return GraphRuntime(triton_model=self.name, runtime=parameters["runtime"].string_value, **timings)

    def sizes(self) -> dict[str, int]:
        """The checkpoint sizes the description's output dimensions name, e.g. hidden_size, as exported."""
        dims_by_name = {tensor.name: list(tensor.dims) for tensor in self.config.output}
        return {
            dim: size
            for spec in self.spec.outputs
            for dim, size in zip(spec.dims, dims_by_name[spec.name])
            if isinstance(dim, str)
        }


@dataclass(frozen=True)
class ServedModel:
    """A catalogued model whose every graph Triton has loaded, at the version a request uses."""

    description: ModelDescription
    versions: tuple[int, ...]
    """Every version loaded for all of the model's graphs, oldest first."""
    graphs: dict[GraphRole, TritonGraph]
    sizes: dict[str, int]
    version: int
    """The version requests go to: the newest unless one asks for another."""

    @property
    def name(self) -> str:
        return self.description.name

    def graph(self, role: GraphRole) -> TritonGraph:
        return self.graphs[role]

    def at_version(self, version: int) -> ServedModel:
        return replace(self, version=version)


async def discover_models(runner: Any) -> dict[str, ServedModel]:
    """Every catalogued model whose graphs are all READY in Triton, with the configs Triton loaded.

    `runner` is the bentoml Triton runner; its client methods are tritonclient's (HTTP, asyncio).
    """
    ready: dict[str, set[int]] = defaultdict(set)
    for entry in await runner.get_model_repository_index():
        if entry.get("state") == "READY":
            ready[entry["name"]].add(int(entry["version"]))
    served = {}
    for description in MODELS.values():
        names = {graph.role: description.triton_name(graph.role) for graph in description.graphs}
        versions = tuple(sorted(set.intersection(*(ready.get(name, set()) for name in names.values()))))
        if not versions:
            continue
        configs = await asyncio.gather(*(runner.get_model_config(name) for name in names.values()))
        graphs = {
            role: TritonGraph.from_config(
                description.graph(role),
                json_format.ParseDict(config, model_config_pb2.ModelConfig(), ignore_unknown_fields=True),
            )
            for role, config in zip(names, configs)
        }
        sizes = {key: value for graph in graphs.values() for key, value in graph.sizes().items()}
        served[description.name] = ServedModel(description, versions, graphs, sizes, version=versions[-1])
    return served
