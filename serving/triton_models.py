"""Served models as the service sees them: tensors, dtypes and sizes read from each `config.pbtxt`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.http.aio as triton_http
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import triton_to_np_dtype

from model_catalog import MODELS, ModelDescription


@dataclass(frozen=True)
class TritonTensor:
    name: str
    datatype: str
    """Triton's wire name, e.g. INT64."""

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(triton_to_np_dtype(self.datatype))


@dataclass(frozen=True)
class TritonModel:
    description: ModelDescription
    version: int
    inputs: tuple[TritonTensor, ...]
    max_batch_size: int
    sizes: dict[str, int]
    """Checkpoint sizes the description's tensor dimensions name, e.g. hidden_size."""

    @classmethod
    def from_config(cls, config_path: Path) -> TritonModel:
        """Read a model's `config.pbtxt`; its name must be in the catalog."""
        config = text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())
        description = MODELS[config.name]
        inputs = tuple(
            TritonTensor(tensor.name, model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_"))
            for tensor in config.input
        )
        dims_by_name = {tensor.name: list(tensor.dims) for tensor in config.output}
        sizes = {
            dim: size
            for spec in description.outputs
            for dim, size in zip(spec.dims, dims_by_name[spec.name])
            if isinstance(dim, str)
        }
        versions = [int(path.name) for path in config_path.parent.iterdir() if path.name.isdigit()]
        return cls(description, max(versions, default=0), inputs, config.max_batch_size, sizes)

    @property
    def name(self) -> str:
        return self.description.name

    def infer_inputs(self, arrays: dict[str, np.ndarray]) -> list[triton_http.InferInput]:
        """One InferInput per config input, in config order, cast to the config's dtype."""
        infer_inputs = []
        for tensor in self.inputs:
            array = arrays[tensor.name].astype(tensor.numpy_dtype, copy=False)
            infer_input = triton_http.InferInput(tensor.name, list(array.shape), tensor.datatype)
            infer_input.set_data_from_numpy(array, binary_data=True)
            infer_inputs.append(infer_input)
        return infer_inputs


def discover_models(repository: Path) -> dict[str, TritonModel]:
    """Every catalogued model that has a `config.pbtxt` in `repository`."""
    return {
        path.parent.name: TritonModel.from_config(path)
        for path in sorted(repository.glob("*/config.pbtxt"))
        if path.parent.name in MODELS
    }
