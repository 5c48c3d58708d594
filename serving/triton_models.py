"""Served models as the service sees them: tensors, dtypes and sizes read from each graph's `config.pbtxt`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.http.aio as triton_http
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import triton_to_np_dtype

from model_catalog import MODELS, GraphRole, GraphSpec, ModelDescription


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
    def from_config(cls, spec: GraphSpec, config_path: Path) -> TritonGraph:
        config = text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())
        inputs = tuple(
            TritonTensor(tensor.name, model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_"))
            for tensor in config.input
        )
        return cls(config.name, spec, inputs, config.max_batch_size, config)

    def infer_inputs(self, arrays: dict[str, np.ndarray]) -> list[triton_http.InferInput]:
        """One InferInput per config input, in config order, cast to the config's dtype."""
        infer_inputs = []
        for tensor in self.inputs:
            array = arrays[tensor.name].astype(tensor.numpy_dtype, copy=False)
            infer_input = triton_http.InferInput(tensor.name, list(array.shape), tensor.datatype)
            infer_input.set_data_from_numpy(array, binary_data=True)
            infer_inputs.append(infer_input)
        return infer_inputs

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
    """A catalogued model whose every graph is in the repository."""

    description: ModelDescription
    version: int
    graphs: dict[GraphRole, TritonGraph]
    sizes: dict[str, int]

    @property
    def name(self) -> str:
        return self.description.name

    def graph(self, role: GraphRole) -> TritonGraph:
        return self.graphs[role]


def _newest_version(model_dir: Path) -> int:
    return max((int(path.name) for path in model_dir.iterdir() if path.name.isdigit()), default=0)


def discover_models(repository: Path) -> dict[str, ServedModel]:
    """Every catalogued model whose graphs all have a `config.pbtxt` in `repository`."""
    served = {}
    for description in MODELS.values():
        dirs = {graph.role: repository / description.triton_name(graph.role) for graph in description.graphs}
        if not all((path / "config.pbtxt").is_file() for path in dirs.values()):
            continue
        graphs = {role: TritonGraph.from_config(description.graph(role), path / "config.pbtxt") for role, path in dirs.items()}
        sizes = {key: value for graph in graphs.values() for key, value in graph.sizes().items()}
        version = min(_newest_version(path) for path in dirs.values())
        served[description.name] = ServedModel(description, version, graphs, sizes)
    return served
