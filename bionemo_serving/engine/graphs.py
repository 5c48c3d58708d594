"""Calling a served model's Triton graphs: token rows cut into chunks of one length bucket, a bound on the chunks one
request keeps in flight, batches split at the graph's max_batch_size; every call through the Triton runner."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import numpy as np

from bionemo_serving.model_catalog import GraphRole
from bionemo_serving.preprocessing import Tokenizer
from bionemo_serving.preprocessing.batching import bucketed_chunks
from bionemo_serving.engine.scheduler import PRIORITY
from bionemo_serving.metrics import record_token_rows
from bionemo_serving.triton import inference
from bionemo_serving.triton.models import ServedModel
from bionemo_serving.triton.registry import ModelRegistry

CHUNKS_IN_FLIGHT = 4
"""Calls to Triton one request keeps in flight; its other chunks wait their turn here. Triton runs a graph's
instances (2) at once and queues the rest, and each call ends after 60 s, its wait in that queue included
(model_catalog.TRITON_CALL_TIMEOUT_S): a 1,000-residue scan sent its 32 chunks at once, and the last ones, minutes back
in Triton's queue, timed out. Four keep both instances busy and a call's wait short."""


class GraphCalls:
    """Runs graphs of served models on arrays; one instance per API worker."""

    def __init__(self, runner: Any, registry: ModelRegistry, tokenizers: Mapping[str, Tokenizer]) -> None:
        """`runner`: the service's bentoml.triton.Runner, whose client every inference call goes through;
        `tokenizers`: each model's, which pads its rows."""
        self.runner, self.registry, self.tokenizers = runner, registry, tokenizers

    async def run_rows(
        self,
        model: ServedModel,
        rows: list[np.ndarray],
        output: str,
        role: GraphRole = GraphRole.ENCODER,
        pool_at_summary: bool = False,
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
        record_token_rows(model.name, role.value, [len(row) for row in rows], positions_sent=sent)
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
            return await inference.infer(self.runner, graph, model.version, arrays, output, PRIORITY.get())
