"""Embeddings and hidden states: tokenize, run the encoder (or the layers graph), post-process.

Also what the other roles share of it: tokenizing with every problem named, which inputs were truncated, and the
padded hidden states of a batch (generation encodes its seed molecules here).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bionemo_serving.model_catalog import Capability, GraphRole
from bionemo_serving.preprocessing import SequenceError, SequenceTooLong, Tokenizer, l2_normalize
from bionemo_serving.engine.cost import Work
from bionemo_serving.engine.graphs import GraphCalls
from bionemo_serving.engine.inputs import EmbedInput, HiddenInput, Pooling, SequencesInput
from bionemo_serving.engine.results import Embeddings, HiddenStates
from bionemo_serving.engine.scheduler import Scheduler
from bionemo_serving.errors import FieldProblem, InvalidRequest
from bionemo_serving.triton.models import ServedModel
from bionemo_serving.triton.registry import ModelRegistry


@dataclass(frozen=True)
class Encoded:
    """Encoder hidden states for a whole batch, in input order, padded to its longest input."""

    hidden_states: np.ndarray
    """[batch, tokens, dim]; [batch, layers, tokens, dim] where layers were asked for."""
    attention_mask: np.ndarray


class Encoder:
    """One instance per API worker, over its graph calls."""

    def __init__(
        self, registry: ModelRegistry, graphs: GraphCalls, tokenizers: Mapping[str, Tokenizer], scheduler: Scheduler
    ) -> None:
        """`scheduler` admits each request's work, once validated, and starts it in its turn."""
        self.registry, self.graphs, self.tokenizers, self.scheduler = registry, graphs, tokenizers, scheduler

    async def embed(self, asked: EmbedInput) -> Embeddings:
        """Each input's vector in input order: the mean of its residues' final hidden states, or its <cls> state."""
        model = await self.registry.model(asked.model, Capability.EMBED, asked.model_version)
        hidden_size = model.sizes["hidden_size"]
        if asked.dimensions is not None and asked.dimensions != hidden_size:
            raise InvalidRequest.at(
                "dimensions",
                f"{model.name} embeddings have {hidden_size} dimensions, not {asked.dimensions}; "
                "they cannot be shortened (leave dimensions out)",
            )
        tokenizer = self.tokenizers[model.name]
        if asked.pooling is Pooling.CLS and tokenizer.summary_position is None:
            raise InvalidRequest.at("pooling", f"{model.name} has no <cls> token; use 'mean'")
        layers = await self.layers(model, asked.layers)
        # The graph pools: over the residues (mean), or over <cls> alone, which is that token's state.
        at_cls = asked.pooling is Pooling.CLS
        rows = self.tokenize(model, asked.sequences, truncate=asked.truncate)
        role = GraphRole.ENCODER if layers is None else GraphRole.LAYERS
        async with self.scheduler.admitted(Work(f"{model.name}/embed").on(model.graph(role), map(len, rows))):
            if layers is None:
                vectors = np.stack(await self.graphs.run_rows(model, rows, "embeddings", pool_at_summary=at_cls))
            else:
                vectors = np.stack(await self.run_layers(model, rows, "layer_embeddings", layers, pool_at_summary=at_cls))
        vectors = l2_normalize(vectors) if asked.normalize else vectors
        tokens = sum(len(row) for row in rows)
        return Embeddings(
            model.name, model.version, vectors, self.truncated(model, asked), tokens, layers, precision=model.precision(role)
        )

    async def hidden(self, asked: HiddenInput) -> HiddenStates:
        """Every token's hidden states (of the layers asked, else the last) and the mask of real tokens."""
        model = await self.registry.model(asked.model, Capability.HIDDEN, asked.model_version)
        layers = await self.layers(model, asked.layers)
        rows = self.tokenize(model, asked.sequences, truncate=asked.truncate)
        role = GraphRole.ENCODER if layers is None else GraphRole.LAYERS
        async with self.scheduler.admitted(Work(f"{model.name}/hidden").on(model.graph(role), map(len, rows))):
            encoded = await self.encode(model, rows, layers)
        truncated = self.truncated(model, asked)
        return HiddenStates(
            model.name, model.version, encoded.hidden_states, encoded.attention_mask, truncated, layers,
            precision=model.precision(role),
        )  # fmt: skip

    async def layers(self, model: ServedModel, asked: Sequence[int] | None) -> list[int] | None:
        """The layers asked for as non-negative indices (None: none were); a 422 naming any out of range, or where
        the model's layers graph is not served."""
        if asked is None:
            return None
        model = await self.registry.model(model.name, Capability.LAYERS, model.version)
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

    async def encode(self, model: ServedModel, rows: list[np.ndarray], layers: list[int] | None = None) -> Encoded:
        """The hidden states of every row of tokens (of `layers`, else the last), zero-padded to the longest, with the
        mask of real tokens."""
        if layers is None:
            states = await self.graphs.run_rows(model, rows, "hidden_states")
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
        return await self.graphs.run_rows(
            model, rows, output, GraphRole.LAYERS, pool_at_summary=pool_at_summary, row_inputs=every_row
        )

    def tokenize(
        self,
        model: ServedModel,
        sequences: Sequence[str],
        field: str = "sequences",
        truncate: bool | None = None,
        masks: bool = False,
    ) -> list[np.ndarray]:
        """Token ids of every input; every problem is reported at once, under `field`.

        `truncate`: the caller's choice for inputs over the length limit; None where it has none to make.
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

    def truncated(self, model: ServedModel, asked: SequencesInput, masks: bool = False) -> list[int]:
        """Which of the inputs were cut to the model's limit (where truncation was asked for)."""
        if not asked.truncate:
            return []
        tokenizer = self.tokenizers[model.name]
        over_limit = functools.partial(tokenizer.is_over_limit, masks=True) if masks else tokenizer.is_over_limit
        return [index for index, sequence in enumerate(asked.sequences) if over_limit(sequence)]
