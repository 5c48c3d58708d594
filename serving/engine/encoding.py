"""/embed and /hidden: tokenize, run the encoder through the Triton runner, post-process."""

from __future__ import annotations

import asyncio
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


@dataclass(frozen=True)
class Embeddings:
    model: ServedModel
    """The model at the version that computed them."""
    vectors: np.ndarray
    """[batch, dim] float32, in input order."""
    truncated: list[int]
    """Indices of the inputs cut to the model's limit, as the request asked."""
    tokens: int
    """Tokens the model read, special tokens included, summed over the inputs (not the batches' padding)."""


@dataclass(frozen=True)
class Encoded:
    """Encoder hidden states for a whole request, in input order, padded to its longest input."""

    hidden_states: np.ndarray
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
        # The graph pools: over the residues (mean), or over <cls> alone, which is that token's state.
        at_cls = request.pooling is Pooling.CLS
        rows = self.tokenize(model, request.sequences, truncate=request.truncate if offers_truncation else None)
        vectors = np.stack(await self.run_encoder(model, rows, "embeddings", pool_at_summary=at_cls))
        vectors = l2_normalize(vectors) if request.normalize else vectors
        return Embeddings(model, vectors, self.truncated(model, request), tokens=sum(len(row) for row in rows))

    async def hidden(self, request: HiddenRequest) -> HiddenResponse:
        model = await self.model(request.model, Capability.HIDDEN, request.model_version)
        encoded = await self.encode(model, request.sequences, truncate=request.truncate)
        return HiddenResponse(
            model=model.name,
            model_version=model.version,
            dim=encoded.hidden_states.shape[2],
            encoding_format=request.encoding_format,
            dtype=request.dtype,
            hiddens=encode_arrays(encoded.hidden_states, request.encoding_format, request.dtype),
            mask=encoded.attention_mask.tolist(),
            truncated=self.truncated(model, request),
        )

    async def encode(
        self, model: ServedModel, sequences: list[str], field: str = "sequences", truncate: bool | None = None
    ) -> Encoded:
        """Every input's hidden states, zero-padded to the longest, with the mask of real tokens."""
        rows = self.tokenize(model, sequences, field, truncate)
        states = await self.run_encoder(model, rows, "hidden_states")
        batch = self.tokenizers[model.name].pad(rows)
        hidden_states = np.zeros(batch.input_ids.shape + states[0].shape[1:], dtype=np.float32)
        for index, (tokens, row) in enumerate(zip(rows, states)):
            hidden_states[index, : len(tokens)] = row[: len(tokens)]  # the chunk's bucket padding is dropped
        return Encoded(hidden_states, batch.attention_mask)

    def tokenize(
        self, model: ServedModel, sequences: list[str], field: str = "sequences", truncate: bool | None = None
    ) -> list[np.ndarray]:
        """Token ids of every input; every problem is reported at once, under `field`.

        `truncate`: the request's choice for inputs over the length limit; None where it has none to make.
        """
        tokenizer = self.tokenizers[model.name]
        rows, problems = [], []
        for index, sequence in enumerate(sequences):
            try:
                rows.append(tokenizer.encode(sequence, index, truncate=bool(truncate)))
            except SequenceError as error:
                hint = ' (or send "truncate": true)' if isinstance(error, SequenceTooLong) and truncate is False else ""
                problems.append(FieldProblem(f"{field}[{error.index}]", error.message + hint))
        if problems:
            raise InvalidRequest(problems)
        return rows

    def truncated(self, model: ServedModel, request: SequencesRequest) -> list[int]:
        """Which of the request's sequences were cut to the model's limit (it asked for it)."""
        if not request.truncate:
            return []
        tokenizer = self.tokenizers[model.name]
        return [index for index, sequence in enumerate(request.sequences) if tokenizer.is_over_limit(sequence)]

    async def run_encoder(
        self, model: ServedModel, rows: list[np.ndarray], output: str, pool_at_summary: bool = False
    ) -> list[np.ndarray]:
        """The encoder's `output` for every row, in input order (per-token outputs padded to the row's bucket).

        Rows are cut into chunks of one length bucket each, sent concurrently: little
        padding within a request, and concurrent requests share shapes, so Triton's
        dynamic batcher merges them. `pool_at_summary` pools the embedding at <cls>
        instead of over the residues.
        """
        tokenizer = self.tokenizers[model.name]
        chunks = bucketed_chunks(
            [len(row) for row in rows], tokenizer.max_model_tokens, model.graph(GraphRole.ENCODER).max_batch_size
        )

        async def run(width: int, members: list[int]) -> np.ndarray:
            batch = tokenizer.pad([rows[index] for index in members], width)
            pooling_mask = None
            if pool_at_summary:
                pooling_mask = np.zeros_like(batch.residue_mask)
                pooling_mask[:, tokenizer.summary_position] = True
            return await self.infer(model, GraphRole.ENCODER, batch.model_inputs(pooling_mask), output)

        sent = sum(width * len(members) for width, members in chunks)
        record_encoder_batches(model.name, [len(row) for row in rows], positions_sent=sent)
        results: list[np.ndarray] = [np.empty(0)] * len(rows)
        for (_, members), outputs in zip(chunks, await asyncio.gather(*(run(*chunk) for chunk in chunks))):
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
