"""A stand-in for `bentoml.triton.Runner` in unit tests of the engine: no tritonserver, no exported model.

It offers what the service calls on the runner (bionemo_serving/triton/models.py, registry.py, inference.py):
`get_model_repository_index`, `get_model_config`, `infer`, `load_model`, `unload_model`. The configs are the ones the
exporter would write (bionemo_serving/exporter/triton_config.py `render_config`, from the catalog's descriptions and the default
checkpoints' sizes, as `exporter defaults` records them), so discovery yields real `ServedModel`s. `infer` checks what
it is sent against the config and answers each graph's output with a small deterministic numpy function of the inputs
(below), which tests use to compute what the engine should answer; every call is recorded. `away` makes every call fail as an unreachable
Triton does. End-to-end tests run the real tritonserver instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from bionemo_serving.exporter.triton_config import render_config
from bionemo_serving.model_catalog import (
    MODELS,
    RANDOM_INIT_WEIGHTS,
    SCORED_AMINO_ACIDS,
    GraphRole,
    GraphSpec,
    ModelDescription,
)
from bionemo_serving.preprocessing.smiles import MEGAMOLBART_TOKENS, SmilesTokenizer


def checkpoint_sizes(description: ModelDescription) -> dict[str, int]:
    """The sizes the exporter reads from a model's default checkpoint (bionemo_serving/exporter/exportable.py, incremental_decoder.py)
    that its Triton tensors and config parameters name."""
    config = description.default_checkpoint_config
    hidden_size = config.get("hidden_size") or config["d_model"]
    layers = config.get("num_hidden_layers") or config.get("num_layers") or config["encoder_layers"]
    return {"hidden_size": hidden_size, "hidden_layers": layers + 1, "vocab_size": len(MEGAMOLBART_TOKENS)}


# The graphs' functions. Each depends on what the real graph's answer depends on, so that a row sent to the wrong
# place, or with the wrong tokens, changes the answer.


def token_states(input_ids: np.ndarray, hidden_size: int) -> np.ndarray:
    """[..., tokens] -> [..., tokens, hidden_size]: feature f of the token at position t is (id + 1) / (f + 1) + t / 100
    (never zero: a vector of <cls>, id 0, can be normalised)."""
    features = np.arange(hidden_size) + 1
    positions = np.arange(input_ids.shape[-1])[:, None] / 100
    return ((input_ids[..., None] + 1) / features + positions).astype(np.float32)


def layer_states(input_ids: np.ndarray, hidden_size: int, layer: int, layers: int) -> np.ndarray:
    """Hidden states of `layer` of `layers` (the config's hidden_layers): the last is the encoder's (token_states),
    each one before it one less."""
    return token_states(input_ids, hidden_size) - np.float32(layers - 1 - layer)


def pooled(states: np.ndarray, pooling_mask: np.ndarray) -> np.ndarray:
    """The mean over the tokens where `pooling_mask` is 1: [..., tokens, dim] -> [..., dim]."""
    weights = pooling_mask[..., None].astype(np.float32)
    return (states * weights).sum(axis=-2) / weights.sum(axis=-2)


def log_probs_at(ids: np.ndarray, position: int) -> np.ndarray:
    """[20] log-probabilities of SCORED_AMINO_ACIDS at token `position` of the row of token `ids` (unpadded): they
    depend on the token there, the position, and every token of the row (masking another position changes them)."""
    amino_acids = np.arange(len(SCORED_AMINO_ACIDS)) + 1
    logits = np.cos(amino_acids * (int(ids[position]) + 1) * 0.37 + position * 0.11 + int(ids.sum()) * 0.013)
    return (logits - np.log(np.exp(logits).sum())).astype(np.float32)


def contact_map(residue_ids: np.ndarray) -> np.ndarray:
    """[residues, residues]: symmetric, from the residues' token ids and their distance."""
    distance = np.abs(np.arange(len(residue_ids))[:, None] - np.arange(len(residue_ids)))
    return (1 / (1 + np.abs(residue_ids[:, None] - residue_ids[None, :]) + distance)).astype(np.float32)


DECODED_ATOM = "C"
"""The decoder writes this token once per real position of a row's source, then its end token (`decoded`)."""
_SMILES = SmilesTokenizer(max_tokens=1)


@dataclass(frozen=True)
class InferCall:
    """One `infer` call as the fake received it."""

    model: str
    version: int
    inputs: dict[str, np.ndarray]
    output: str
    priority: int = 0
    """Triton's queue priority it was sent with (1 first; 0: the config's default)."""

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: array.shape for name, array in self.inputs.items()}


class FakeRunner:
    """The Triton runner's client methods over the catalog's models, answered in this process."""

    def __init__(
        self, models: Iterable[str] = tuple(MODELS), versions: Iterable[int] = (1,), absent: Iterable[str] = ()
    ) -> None:
        """Every graph of `models` in the repository (less the Triton models named in `absent`: a checkpoint without
        that head), each loaded at `versions`."""
        self.graphs: dict[str, tuple[ModelDescription, GraphSpec]] = {
            description.triton_name(graph.role): (description, graph)
            for description in (MODELS[name] for name in models)
            for graph in description.graphs
            if description.triton_name(graph.role) not in set(absent)
        }
        self.versions = tuple(versions)
        self.loaded: dict[str, set[int]] = {name: set(self.versions) for name in self.graphs}
        self.configs = {name: self._config(*self.graphs[name]) for name in self.graphs}
        self.broken: set[str] = set()
        """Triton models whose load fails (their files are broken)."""
        self.away = False
        """Every call fails as when tritonserver is not reachable."""
        self.gate: asyncio.Event | None = None
        """Where set, every call waits for it."""
        self.calls: list[InferCall] = []
        self.index_calls = 0
        self.in_flight = self.most_in_flight = 0
        self._decoder_rows: dict[int, list[int]] = {}
        """The decoder's caches: each row id's tokens left to write."""

    @staticmethod
    def _config(description: ModelDescription, graph: GraphSpec) -> model_config_pb2.ModelConfig:
        text = render_config(description, graph, checkpoint_sizes(description), checkpoint=RANDOM_INIT_WEIGHTS)
        return text_format.Parse(text, model_config_pb2.ModelConfig())

    async def _answer(self) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.away:
            raise aiohttp.ClientConnectionError("Cannot connect to host 127.0.0.1:8000 [Connection refused]")

    async def get_model_repository_index(self) -> list[dict[str, str]]:
        """Every model of the repository with its state, as when asked (before any wait at the gate)."""
        self.index_calls += 1
        index = []
        for name in sorted(self.graphs):
            if self.loaded[name]:
                index += [{"name": name, "version": str(v), "state": "READY"} for v in sorted(self.loaded[name])]
            else:
                index.append({"name": name, "state": "UNAVAILABLE", "reason": "unloaded"})
        await self._answer()
        return index

    async def get_model_config(self, name: str) -> dict[str, Any]:
        await self._answer()
        if not self.loaded.get(name):
            raise InferenceServerException(f"Request for unknown model: '{name}' is not found")
        return json_format.MessageToDict(self.configs[name], preserving_proto_field_name=True)

    async def load_model(self, name: str) -> None:
        await self._answer()
        if name not in self.graphs or name in self.broken:
            raise InferenceServerException(f"failed to load '{name}'")
        self.loaded[name] = set(self.versions)

    async def unload_model(self, name: str) -> None:
        await self._answer()
        self.loaded[name] = set()

    async def infer(
        self,
        model_name: str,
        inputs: list[Any],
        model_version: str,
        outputs: list[Any],
        headers: dict[str, str],
        priority: int = 0,
    ) -> FakeResult:
        await self._answer()
        if int(model_version) not in self.loaded.get(model_name, ()):
            raise InferenceServerException(f"Request for unknown model: '{model_name}' version {model_version}")
        arrays = {
            tensor.name(): np.frombuffer(tensor._get_binary_data(), dtype=triton_to_np_dtype(tensor.datatype()))
            .reshape(tensor.shape())
            .copy()
            for tensor in inputs
        }
        (output,) = [requested.name() for requested in outputs]
        call = InferCall(model_name, int(model_version), arrays, output, priority)
        self._check(call, [tensor.datatype() for tensor in inputs])
        self.calls.append(call)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)  # the other calls of a request start meanwhile, as on a real connection
            answer = self._run(call)
        finally:
            self.in_flight -= 1
        self._check_answer(call, answer)
        return FakeResult(output, answer)

    def _check(self, call: InferCall, datatypes: list[str]) -> None:
        """The inputs are the config's, in its order, with its dtypes and ranks; the batch within max_batch_size; the
        output one of the config's. A mismatch is the engine's bug: it fails the test, not the request."""
        config = self.configs[call.model]
        expected = [(tensor.name, model_config_pb2.DataType.Name(tensor.data_type)[5:]) for tensor in config.input]
        assert list(zip(call.inputs, datatypes)) == expected, (call.model, list(zip(call.inputs, datatypes)))
        batch_axis = 1 if config.max_batch_size else 0
        for tensor in config.input:
            assert call.inputs[tensor.name].ndim == len(tensor.dims) + batch_axis, (call.model, tensor.name)
        if config.max_batch_size:
            assert len(call.inputs[config.input[0].name]) <= config.max_batch_size, (call.model, call.shapes)
        assert call.output in [tensor.name for tensor in config.output], (call.model, call.output)

    def _check_answer(self, call: InferCall, answer: np.ndarray) -> None:
        """The fake's own check: its answer has the output's shape in the config, the batch first where Triton
        batches."""
        config = self.configs[call.model]
        (spec,) = [tensor for tensor in config.output if tensor.name == call.output]
        dims = ([len(call.inputs[config.input[0].name])] if config.max_batch_size else []) + list(spec.dims)
        assert answer.ndim == len(dims), (call.model, call.output, answer.shape)
        assert all(dim in (-1, size) for dim, size in zip(dims, answer.shape)), (call.model, call.output, answer.shape)

    def _run(self, call: InferCall) -> np.ndarray:
        description, graph = self.graphs[call.model]
        sizes = checkpoint_sizes(description)
        hidden_size = sizes["hidden_size"]
        arrays = call.inputs
        if graph.role is GraphRole.ENCODER:
            states = token_states(arrays["input_ids"], hidden_size)
            return states if call.output == "hidden_states" else pooled(states, arrays["pooling_mask"])
        if graph.role is GraphRole.LAYERS:
            states = np.stack(
                [
                    np.stack([layer_states(ids, hidden_size, int(layer), sizes["hidden_layers"]) for layer in layers])
                    for ids, layers in zip(arrays["input_ids"], arrays["layers"])
                ]
            )
            return states if call.output == "layer_hidden_states" else pooled(states, arrays["pooling_mask"][:, None])
        if graph.role is GraphRole.LANGUAGE_MODEL:
            rows = [ids[mask.astype(bool)] for ids, mask in zip(arrays["input_ids"], arrays["attention_mask"])]
            asked = arrays["positions"]
            return np.stack([[log_probs_at(row, int(p)) for p in positions] for row, positions in zip(rows, asked)])
        if graph.role is GraphRole.CONTACTS:
            return np.stack([contact_map(ids[1:-1]) for ids in arrays["input_ids"]])
        return self._decode_step(arrays)

    def decoded(self, states: np.ndarray) -> str:
        """What the decoder writes from a source's states at its real positions: DECODED_ATOM once per position. A
        test overrides it to make the writing depend on the values (tests/unit/test_optimization.py)."""
        return DECODED_ATOM * len(states)

    def _decode_step(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """The stateful decoder: a row starting from a source writes `decoded(source)` token by token, then ends; a
        row extending a cache (its parent) goes on where the parent was."""
        sources = iter(zip(arrays["encoder_hidden_states"], arrays["encoder_mask"].astype(bool)))
        left = []
        for parent in arrays["parent_ids"].tolist():
            if parent >= 0 and parent not in self._decoder_rows:
                raise InferenceServerException(f"the decoder has no cache {parent}")
            if parent < 0:
                states, mask = next(sources)
                left.append([_SMILES.ids[token] for token in _SMILES.split(self.decoded(states[mask]))])
            else:
                left.append(self._decoder_rows[parent])
        for released in arrays["released_ids"].tolist():  # a call releases the parents it extends
            self._decoder_rows.pop(released, None)
        logits = np.full((len(left), len(MEGAMOLBART_TOKENS)), -10.0, dtype=np.float32)
        for row, (row_id, tokens) in enumerate(zip(arrays["row_ids"].tolist(), left)):
            logits[row, tokens[0] if tokens else _SMILES.end_id] = 10.0
            self._decoder_rows[row_id] = tokens[1:]
        return logits


@dataclass(frozen=True)
class FakeResult:
    """What `infer` returns: tritonclient's InferResult, of the one output asked for."""

    output: str
    array: np.ndarray

    def as_numpy(self, name: str) -> np.ndarray | None:
        return self.array if name == self.output else None
