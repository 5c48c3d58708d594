"""/embed and /hidden: tokenize, run the encoder through the Triton runner, post-process."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from model_catalog import MODELS, Capability, GraphRole
from preprocessing import SequenceError, SequenceTooLong, Tokenizer, l2_normalize, tokenizer_for
from preprocessing.batching import bucketed_chunks
from serving.engine.payloads import encode_arrays
from serving.errors import FieldProblem, InvalidRequest
from serving.metrics import record_encoder_batches
from serving.protocol import (
    EmbedRequest,
    HiddenRequest,
    HiddenResponse,
    Pooling,
    SequencesRequest,
)
from serving.triton import inference
from serving.triton.models import ServedModel
from serving.triton.registry import ModelRegistry

CHUNKS_IN_FLIGHT = 4
"""Calls to Triton one request keeps in flight; its other chunks wait their turn here. Triton runs a graph's
instances (2) at once and queues the rest, and each call ends after 60 s, its wait in that queue included
(registry.TRITON_CALL_TIMEOUT_S): a 1,000-residue scan sent its 32 chunks at once, and the last ones, minutes back
in Triton's queue, timed out. Four keep both instances busy and a call's wait short."""


@dataclass(frozen=True)
class Embeddings:
    model: ServedModel
    """The model at the version that computed them."""
    vectors: np.ndarray
    """[batch, dim] float32, in input order; [batch, layers, dim] with `layers`."""
    truncated: list[int]
    """Indices of the inputs cut to the model's limit, as the request asked."""
    tokens: int
    """Tokens the model read, special tokens included, summed over the inputs (not the batches' padding)."""
    layers: list[int] | None = None
    """The layers of `vectors`, where the request named some."""


@dataclass(frozen=True)
class Encoded:
    """Encoder hidden states for a whole request, in input order, padded to its longest input."""

    hidden_states: np.ndarray
    """[batch, tokens, dim]; [batch, layers, tokens, dim] where layers were asked for."""
    attention_mask: np.ndarray


class EncoderEngine:
    """Turns validated requests into Triton calls; one instance per API worker."""

    def __init__(self, runner: Any, registry: ModelRegistry) -> None:
        """`runner`: the service's bentoml.triton.Runner, whose client every inference call goes through."""
        self.runner, self.registry = runner, registry
        self.tokenizers: dict[str, Tokenizer] = {name: tokenizer_for(description) for name, description in MODELS.items()}

    async def model(self, name: str, capability: Capability, version: int | None = None) -> ServedModel:
        return await self.registry.model(name, capability, version)

    async def embed(self, request: EmbedRequest, offers_truncation: bool = True) -> Embeddings:
        """The model (at the version used), its [batch, dim] float32 embeddings in input order, what was cut.

        `offers_truncation`: False for a front whose requests cannot ask for it (OpenAI's embeddings), so that a
        sequence over the limit is not answered with a hint to send `truncate`.
        """
        model = await self.model(request.model, Capability.EMBED, request.model_version)
        tokenizer = self.tokenizers[model.name]
        if request.pooling is Pooling.CLS and tokenizer.summary_position is None:
            raise InvalidRequest.at("pooling", f"{model.name} has no <cls> token; use 'mean'")
        layers = await self.layers(model, request.layers)
        # The graph pools: over the residues (mean), or over <cls> alone, which is that token's state.
        at_cls = request.pooling is Pooling.CLS
        rows = self.tokenize(model, request.sequences, truncate=request.truncate if offers_truncation else None)
        if layers is None:
            vectors = np.stack(await self.run_encoder(model, rows, "embeddings", pool_at_summary=at_cls))
        else:
            vectors = np.stack(await self.run_layers(model, rows, "layer_embeddings", layers, pool_at_summary=at_cls))
        vectors = l2_normalize(vectors) if request.normalize else vectors
        return Embeddings(model, vectors, self.truncated(model, request), sum(len(row) for row in rows), layers)

    async def hidden(self, request: HiddenRequest) -> HiddenResponse:
        model = await self.model(request.model, Capability.HIDDEN, request.model_version)
        layers = await self.layers(model, request.layers)
        encoded = await self.encode(model, request.sequences, truncate=request.truncate, layers=layers)
        return HiddenResponse(
            model=model.name,
            model_version=model.version,
            dim=encoded.hidden_states.shape[-1],
            encoding_format=request.encoding_format,
            dtype=request.dtype,
            hiddens=encode_arrays(encoded.hidden_states, request.encoding_format, request.dtype),
            mask=encoded.attention_mask.tolist(),
            layers=layers,
            truncated=self.truncated(model, request),
        )

    async def layers(self, model: ServedModel, asked: list[int] | None) -> list[int] | None:
        """The request's `layers` as non-negative indices (None: it named none); a 422 naming any out of range, or
        where the model's layers graph is not served."""
        if asked is None:
            return None
        model = await self.model(model.name, Capability.LAYERS, model.version)
        count = model.sizes["hidden_layers"]
        problems = [
            FieldProblem(f"layers[{index}]", f"{model.name} has hidden states 0 (the embedding layer's output) to "
                         f"{count - 1} (its last layer's), or -{count} to -1 counting from the end; not {layer}")
            for index, layer in enumerate(asked)
            if not -count <= layer < count
        ]  # fmt: skip
        if problems:
            raise InvalidRequest(problems)
        return [layer % count for layer in asked]

    async def encode(
        self,
        model: ServedModel,
        sequences: list[str],
        field: str = "sequences",
        truncate: bool | None = None,
        layers: list[int] | None = None,
    ) -> Encoded:
        """Every input's hidden states (of `layers`, else the last), zero-padded to the longest, with the mask of real
        tokens."""
        rows = self.tokenize(model, sequences, field, truncate)
        if layers is None:
            states = await self.run_encoder(model, rows, "hidden_states")
        else:
            states = await self.run_layers(model, rows, "layer_hidden_states", layers)
        batch = self.tokenizers[model.name].pad(rows)
        width = batch.input_ids.shape[1]
        hidden_states = np.zeros((len(rows), *states[0].shape[:-2], width, states[0].shape[-1]), dtype=np.float32)
        for index, (tokens, row) in enumerate(zip(rows, states)):
            hidden_states[index, ..., : len(tokens), :] = row[..., : len(tokens), :]  # the bucket padding is dropped
        return Encoded(hidden_states, batch.attention_mask)

    async def run_layers(
        self, model: ServedModel, rows: list[np.ndarray], output: str, layers: list[int], pool_at_summary: bool = False
    ) -> list[np.ndarray]:
        """The layers graph's `output` of `layers` for every row, in input order."""
        every_row = {"layers": [np.array(layers)] * len(rows)}
        return await self.run_encoder(model, rows, output, pool_at_summary, GraphRole.LAYERS, row_inputs=every_row)

    def tokenize(
        self,
        model: ServedModel,
        sequences: list[str],
        field: str = "sequences",
        truncate: bool | None = None,
        masks: bool = False,
    ) -> list[np.ndarray]:
        """Token ids of every input; every problem is reported at once, under `field`.

        `truncate`: the request's choice for inputs over the length limit; None where it has none to make.
        `masks`: `<mask>` may stand for a residue (a protein model's language-model requests).
        """
        tokenizer = self.tokenizers[model.name]
        encode = functools.partial(tokenizer.encode, masks=True) if masks else tokenizer.encode
        rows, problems = [], []
        for index, sequence in enumerate(sequences):
            try:
                rows.append(encode(sequence, index, truncate=bool(truncate)))
            except SequenceError as error:
                hint = ' (or send "truncate": true)' if isinstance(error, SequenceTooLong) and truncate is False else ""
                problems.append(FieldProblem(f"{field}[{error.index}]", error.message + hint))
        if problems:
            raise InvalidRequest(problems)
        return rows

    def truncated(self, model: ServedModel, request: SequencesRequest, masks: bool = False) -> list[int]:
        """Which of the request's sequences were cut to the model's limit (it asked for it)."""
        if not request.truncate:
            return []
        tokenizer = self.tokenizers[model.name]
        over_limit = functools.partial(tokenizer.is_over_limit, masks=True) if masks else tokenizer.is_over_limit
        return [index for index, sequence in enumerate(request.sequences) if over_limit(sequence)]

    async def run_encoder(
        self,
        model: ServedModel,
        rows: list[np.ndarray],
        output: str,
        pool_at_summary: bool = False,
        role: GraphRole = GraphRole.ENCODER,
        exact_widths: bool = False,
        row_inputs: dict[str, list[np.ndarray]] | None = None,
    ) -> list[np.ndarray]:
        """The `output` of the encoder (or another graph of token rows, `role`) for every row, in input order
        (per-token outputs padded to the row's bucket).

        Rows are cut into chunks of one length bucket each, sent concurrently: little
        padding within a request, and concurrent requests share shapes, so Triton's
        dynamic batcher merges them. `exact_widths` groups rows by their own length instead, for requests of many
        rows of one length (a score's masked copies). `pool_at_summary` pools the embedding at <cls> instead of
        over the residues. `row_inputs` are more inputs of the graph, an array per row (of one shape within each
        chunk).
        """
        tokenizer = self.tokenizers[model.name]
        chunks = bucketed_chunks(
            [len(row) for row in rows], tokenizer.max_model_tokens, model.graph(role).max_batch_size, exact_widths
        )

        async def run(width: int, members: list[int]) -> np.ndarray:
            batch = tokenizer.pad([rows[index] for index in members], width)
            pooling_mask = None
            if pool_at_summary:
                pooling_mask = np.zeros_like(batch.residue_mask)
                pooling_mask[:, tokenizer.summary_position] = True
            more = {name: np.stack([arrays[index] for index in members]) for name, arrays in (row_inputs or {}).items()}
            return await self.infer(model, role, batch.model_inputs(pooling_mask) | more, output)

        sent = sum(width * len(members) for width, members in chunks)
        record_encoder_batches(model.name, [len(row) for row in rows], positions_sent=sent)
        in_flight = asyncio.Semaphore(CHUNKS_IN_FLIGHT)

        async def run_in_turn(width: int, members: list[int]) -> np.ndarray:
            async with in_flight:
                return await run(width, members)

        results: list[np.ndarray] = [np.empty(0)] * len(rows)
        for (_, members), outputs in zip(chunks, await asyncio.gather(*(run_in_turn(*chunk) for chunk in chunks))):
            for index, result in zip(members, outputs):
                results[index] = result
        return results

    async def infer(
        self, model: ServedModel, role: GraphRole, arrays: dict[str, np.ndarray], output: str
    ) -> np.ndarray:
        """Run one graph of `model` at its version and return its `output`; Triton away is a 503.

        A batch larger than the graph's max_batch_size goes as several concurrent calls (a
        graph Triton does not batch, max_batch_size 0, takes its arrays whole). No metadata
        round trip per call: the config was read once, at discovery.
        """
        graph = model.graph(role)
        rows = len(next(iter(arrays.values())))
        if 0 < graph.max_batch_size < rows:
            parts = [
                {name: array[start : start + graph.max_batch_size] for name, array in arrays.items()}
                for start in range(0, rows, graph.max_batch_size)
            ]
            return np.concatenate(await asyncio.gather(*(self.infer(model, role, part, output) for part in parts)))
        with self.registry.calling(f"{graph.name} version {model.version}"):
            return await inference.infer(self.runner, graph, model.version, arrays, output)
