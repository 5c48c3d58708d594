"""BioNeMo 1.x's gRPC services (protos/*.proto) on `bentoml serve-grpc`: thin adapters over the engine.

Code generated from BioNeMo's own `.proto` files (its InferenceWrapper with `GenerativeSamplerStub`) calls these
unchanged. Each method turns its message into the engine's input, runs it on the same engine as every other front
under the same admission (in-flight bound, deadline), and flattens the arrays with their `dim` as BioNeMo's servers
did (and, like them, answers `smis` only from `HiddenToSmis`). Errors are the service's typed errors, answered with
their gRPC code by bionemo_serving/fronts/bentoml/grpc_server.py, and name the message's fields (`smis[2]`, `seqs[0]`,
`hidden_states`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from types import ModuleType

import bentoml
import grpc
import numpy as np

from bionemo_serving.engine.engine import Engine
from bionemo_serving.model_catalog import DEFAULT_MOLECULE_MODEL
from bionemo_serving.engine.inputs import DecodeInput, EmbedInput, HiddenInput
from bionemo_serving.errors import InvalidRequest, ServiceError
from bionemo_serving.fronts.admission import Admission
from bionemo_serving.fronts.bionemo_grpc.protos import (
    esm1nv_pb2,
    esm1nv_pb2_grpc,
    megamolbart_pb2,
    megamolbart_pb2_grpc,
    prott5nv_pb2,
    prott5nv_pb2_grpc,
)
from bionemo_serving.metrics import counted


@contextlib.contextmanager
def _fields_named(names: dict[str, str]) -> Iterator[None]:
    """A `ServiceError` raised inside names the message's fields: `sequences[1]` becomes `smis[1]`, and so on."""
    try:
        yield
    except ServiceError as error:
        raise error.renamed(functools.partial(_field_named, names)) from None


def _field_named(names: dict[str, str], field: str) -> str:
    head, bracket, rest = field.partition("[")
    return names.get(head, head) + bracket + rest


@contextlib.contextmanager
def _one_call(path: str, model: str, names: dict[str, str]) -> Iterator[None]:
    """One call of a method: counted in the service's metrics under its gRPC path, its errors naming the message's
    fields."""
    with counted(path, model), _fields_named(names):
        yield


def _shape(dim: list[int], rank: int, field: str) -> tuple[int, ...]:
    if len(dim) != rank or min(dim, default=0) < 1:
        raise InvalidRequest.at("dim", f"is {list(dim)}; {field} needs {rank} positive sizes")
    return tuple(dim)


def _service_name(messages: ModuleType) -> str:
    """`<package>.GenerativeSampler`, as gRPC, reflection and health name the service of a package's messages."""
    return messages.DESCRIPTOR.services_by_name["GenerativeSampler"].full_name


def _method_path(messages: ModuleType, method: str) -> str:
    """The gRPC path of a GenerativeSampler method, the `endpoint` of its metrics: /<package>.GenerativeSampler/<method>."""
    return f"/{_service_name(messages)}/{method}"


class MegaMolBARTSampler(megamolbart_pb2_grpc.GenerativeSamplerServicer):
    """`bionemo.model.molecule.megamolbart.grpc.GenerativeSampler`, served by megamolbart."""

    SMILES_FIELDS = {"sequences": "smis", "hiddens": "hidden_states", "mask": "masks"}

    def __init__(self, engine: Engine, admission: Admission) -> None:
        self.engine, self.admission = engine, admission

    def _call(self, method: str) -> contextlib.AbstractContextManager[None]:
        return _one_call(_method_path(megamolbart_pb2, method), DEFAULT_MOLECULE_MODEL, self.SMILES_FIELDS)

    async def SmilesToEmbedding(
        self, request: megamolbart_pb2.InputSpec, context: grpc.aio.ServicerContext
    ) -> megamolbart_pb2.OutputSpec:
        with self._call("SmilesToEmbedding"):
            embedded = await self.admission.run(self.engine.embed(EmbedInput(list(request.smis), DEFAULT_MOLECULE_MODEL, truncate=None)))
        vectors = embedded.vectors
        return megamolbart_pb2.OutputSpec(embeddings=vectors.ravel().tolist(), dim=vectors.shape)

    async def SmilesToHidden(
        self, request: megamolbart_pb2.InputSpec, context: grpc.aio.ServicerContext
    ) -> megamolbart_pb2.OutputSpec:
        with self._call("SmilesToHidden"):
            hidden = await self.admission.run(self.engine.hidden(HiddenInput(list(request.smis), DEFAULT_MOLECULE_MODEL, truncate=None)))
        return megamolbart_pb2.OutputSpec(
            hidden_states=hidden.states.ravel().tolist(),
            dim=hidden.states.shape,
            masks=hidden.mask.astype(bool).ravel().tolist(),
        )

    async def HiddenToSmis(
        self, request: megamolbart_pb2.InputSpec, context: grpc.aio.ServicerContext
    ) -> megamolbart_pb2.OutputSpec:
        with self._call("HiddenToSmis"):
            batch, length, hidden_size = _shape(list(request.dim), 3, "hidden_states [batch, length, hidden]")
            if len(request.hidden_states) != batch * length * hidden_size:
                raise InvalidRequest.at(
                    "hidden_states",
                    f"has {len(request.hidden_states)} values; dim {list(request.dim)} needs {batch * length * hidden_size}",
                )
            if len(request.masks) != batch * length:
                raise InvalidRequest.at(
                    "masks", f"has {len(request.masks)} values; dim {list(request.dim)} needs {batch * length}"
                )
            states = np.asarray(request.hidden_states, dtype=np.float32).reshape(batch, length, hidden_size)
            mask = np.asarray(request.masks, dtype=np.int64).reshape(batch, length)
            decoded = await self.admission.run(self.engine.decode(DecodeInput(states, mask, DEFAULT_MOLECULE_MODEL)))
        return megamolbart_pb2.OutputSpec(smis=decoded.smiles)


class ProteinSampler:
    """`bionemo.model.protein.<esm1nv|prott5nv>.grpc.GenerativeSampler`: per-token hidden states of `model`."""

    messages: ModuleType
    """The package's generated messages (esm1nv's and prott5nv's have the same fields, in packages of their own)."""

    def __init__(self, model: str, engine: Engine, admission: Admission) -> None:
        self.model, self.engine, self.admission = model, engine, admission

    async def SeqToEmbedding(
        self, request: esm1nv_pb2.InputSpec, context: grpc.aio.ServicerContext
    ) -> esm1nv_pb2.OutputSpec:
        with _one_call(_method_path(self.messages, "SeqToEmbedding"), self.model, {"sequences": "seqs"}):
            hidden = await self.admission.run(self.engine.hidden(HiddenInput(list(request.seqs), self.model, truncate=None)))
        states = hidden.states
        return self.messages.OutputSpec(embeddings=states.ravel().tolist(), dim=states.shape)


class Esm1nvSampler(ProteinSampler, esm1nv_pb2_grpc.GenerativeSamplerServicer):
    messages = esm1nv_pb2


class ProtT5nvSampler(ProteinSampler, prott5nv_pb2_grpc.GenerativeSamplerServicer):
    messages = prott5nv_pb2


def mount(service: bentoml.legacy.Service, engine: Engine, admission: Admission, esm1nv_model: str) -> None:
    """Mount the three services on `service`'s gRPC server; `esm1nv_model` answers the esm1nv package."""
    mounts = (
        (functools.partial(MegaMolBARTSampler, engine, admission), megamolbart_pb2, megamolbart_pb2_grpc),
        (functools.partial(Esm1nvSampler, esm1nv_model, engine, admission), esm1nv_pb2, esm1nv_pb2_grpc),
        (functools.partial(ProtT5nvSampler, "prott5nv", engine, admission), prott5nv_pb2, prott5nv_pb2_grpc),
    )
    for servicer, messages, services in mounts:
        service.mount_grpc_servicer(servicer, services.add_GenerativeSamplerServicer_to_server, [_service_name(messages)])
