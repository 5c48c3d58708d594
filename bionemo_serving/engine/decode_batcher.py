"""Continuous batching of decoder steps across the /decode and /generate requests in flight in one API worker.

Every step sends one token for each row of every request being decoded (all its
samples and beams) to Triton together: a request joins at the next step and
leaves when its last row has ended, without waiting for the others. Triton's
decoder model keeps each row's key-value cache (bionemo_serving/runtimes/backends/stateful_decoder.py):
rows are named by ids this batcher hands out, new at every step; each names the
row it extends (beams fork), and each call releases the caches no longer needed.
A request's encoder states go to Triton once, when its rows start.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from bionemo_serving.metrics import DECODER_STEP_ROWS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Latents:
    """Encoder states to decode from, one row per molecule to produce."""

    hidden_states: np.ndarray
    mask: np.ndarray


@dataclass(frozen=True)
class StepRows:
    """A decoding's rows for the next step."""

    tokens: np.ndarray
    """[rows] each row's newest token (the begin token for a row that starts)."""
    parents: np.ndarray
    """[rows] the row of the decoding's previous step that each extends, or -1 to start from a latent."""
    sources: np.ndarray
    """[rows] the latent each starting row decodes (ignored for the others)."""


class Decoding(Protocol):
    """One request's decoding (greedy, sampling or beam search) as the batcher drives it."""

    latents: Latents

    def query(self) -> StepRows:
        """The rows that need their next token's logits."""
        ...

    def advance(self, logits: np.ndarray) -> bool:
        """Take the logits [rows, vocab] of `query()`'s rows; True once the decoding has finished."""
        ...


Step = Callable[[dict[str, np.ndarray]], Awaitable[np.ndarray]]
"""One call of the decoder graph: its inputs by tensor name -> logits [rows, vocab]."""


@dataclass
class _InFlight:
    decoding: Decoding
    finished: asyncio.Future[None]
    row_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """The cache ids of the decoding's rows at its last step."""


class DecodeBatcher:
    """Runs the decodings of one model version, all in flight together, one decoder step at a time."""

    def __init__(self, step: Step, hidden_size: int, model: str) -> None:
        """`model` names the decoder in the metrics (rows per step)."""
        self._step = step
        self._hidden_size = hidden_size
        self._rows_per_step = DECODER_STEP_ROWS.labels(model)
        # Ids from a random start: API workers share the Triton model's caches without colliding.
        self._ids = itertools.count(secrets.randbits(62))
        self._joining: list[_InFlight] = []
        self._running: asyncio.Task[None] | None = None

    async def decode(self, decoding: Decoding) -> None:
        """Return when `decoding` has finished; a failed step fails every request in it (e.g. Triton away: a 503)."""
        finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._joining.append(_InFlight(decoding, finished))
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._run())
        await finished

    async def _run(self) -> None:
        active: list[_InFlight] = []
        released: list[np.ndarray] = []
        while True:
            active += self._joining
            self._joining = []
            # Finished, failed, or its client went away (the future cancelled): its caches go with the next call.
            released += [flight.row_ids for flight in active if flight.finished.done()]
            active = [flight for flight in active if not flight.finished.done()]
            if not active and not any(len(ids) for ids in released):
                return
            pending = np.concatenate([np.zeros(0, dtype=np.int64), *released])
            released = []
            try:
                queries = [flight.decoding.query() for flight in active]
                arrays, row_ids = self._inputs(active, queries, pending)
                logits = await self._step(arrays)
                if active:
                    self._rows_per_step.observe(len(arrays["row_ids"]))
            except Exception as error:  # noqa: BLE001 - handed to every waiting request, which raises it
                if not active:  # a call that only released caches: Triton forgets unused ones anyway
                    logger.warning("releasing %d decoder caches failed: %s", len(pending), error)
                    continue
                released = [pending]  # again with the next call, with the failed requests' rows
                for flight in active:
                    if not flight.finished.done():
                        flight.finished.set_exception(error)
                continue
            offsets = np.cumsum([0] + [len(rows.tokens) for rows in queries])
            for flight, ids, start, stop in zip(active, row_ids, offsets[:-1], offsets[1:]):
                flight.row_ids = ids
                if flight.finished.done():
                    continue
                try:
                    if flight.decoding.advance(logits[start:stop]):
                        flight.finished.set_result(None)
                except Exception as error:  # noqa: BLE001 - fails this request alone
                    flight.finished.set_exception(error)

    def _inputs(
        self, active: list[_InFlight], queries: list[StepRows], released: np.ndarray
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        """The decoder's inputs for every query, and each decoding's new row ids; every previous row is released."""
        row_ids = [np.fromiter(itertools.islice(self._ids, len(rows.tokens)), np.int64, len(rows.tokens)) for rows in queries]
        parent_ids = []
        sources: list[tuple[np.ndarray, np.ndarray]] = []
        for flight, rows in zip(active, queries):
            starting = rows.parents < 0
            parents = np.full(len(rows.tokens), -1, dtype=np.int64)
            parents[~starting] = flight.row_ids[rows.parents[~starting]]
            parent_ids.append(parents)
            latents = flight.decoding.latents
            sources += [(latents.hidden_states[row], latents.mask[row]) for row in rows.sources[starting]]
        width = max((len(mask) for _, mask in sources), default=0)
        encoder_hidden_states = np.zeros((len(sources), width, self._hidden_size), dtype=np.float32)
        encoder_mask = np.zeros((len(sources), width), dtype=np.int64)
        for index, (states, mask) in enumerate(sources):
            encoder_hidden_states[index, : len(mask)] = states
            encoder_mask[index, : len(mask)] = mask
        arrays = {
            "row_ids": np.concatenate([np.zeros(0, dtype=np.int64), *row_ids]),
            "parent_ids": np.concatenate([np.zeros(0, dtype=np.int64), *parent_ids]),
            "tokens": np.concatenate([np.zeros(0, dtype=np.int64), *(rows.tokens for rows in queries)]),
            "encoder_hidden_states": encoder_hidden_states,
            "encoder_mask": encoder_mask,
            "released_ids": np.concatenate([released, *(flight.row_ids for flight in active)]),
        }
        return arrays, row_ids
