"""Continuous batching of decoder steps across the /decode and /generate requests in flight in one API worker.

Every step sends the prefixes of every request being decoded (all its samples
and beams) to Triton together: a request joins at the next step and leaves when
its last row has ended, without waiting for the others. The decoder-step graph
is stateless and reads each row's logits at its own last token, so rows of
different lengths and different sources share a batch; each request keeps its
encoder states and sends them with its rows, never encoding twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Latents:
    """Encoder states to decode from, one row per molecule to produce."""

    hidden_states: np.ndarray
    mask: np.ndarray


class Decoding(Protocol):
    """One request's decoding (greedy, sampling or beam search) as the batcher drives it."""

    latents: Latents

    def query(self) -> tuple[np.ndarray, np.ndarray]:
        """The prefixes that need their next token's logits: decoder ids [rows, length], and the latent row of each."""
        ...

    def advance(self, logits: np.ndarray) -> bool:
        """Take the logits [rows, vocab] of `query()`'s prefixes; True once the decoding has finished."""
        ...


Step = Callable[[dict[str, np.ndarray]], Awaitable[np.ndarray]]
"""One call of the decoder-step graph: its inputs by tensor name -> logits [rows, vocab]."""


class DecodeBatcher:
    """Runs the decodings of one model version, all in flight together, one decoder step at a time."""

    def __init__(self, step: Step, pad_id: int) -> None:
        self._step = step
        self._pad_id = pad_id
        self._joining: list[tuple[Decoding, asyncio.Future[None]]] = []
        self._running: asyncio.Task[None] | None = None

    async def decode(self, decoding: Decoding) -> None:
        """Return when `decoding` has finished; a failed step fails every request in it (e.g. Triton away: a 503)."""
        finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._joining.append((decoding, finished))
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._run())
        await finished

    async def _run(self) -> None:
        active: list[tuple[Decoding, asyncio.Future[None]]] = []
        while True:
            # A request whose client went away (its future cancelled) is dropped at the next step.
            active = [(decoding, finished) for decoding, finished in active + self._joining if not finished.done()]
            self._joining = []
            if not active:
                return
            try:
                queries = [decoding.query() for decoding, _ in active]
                logits = await self._step(self._inputs(active, queries))
            except Exception as error:  # noqa: BLE001 - handed to every waiting request, which raises it
                for _, finished in active:
                    if not finished.done():
                        finished.set_exception(error)
                active = []
                continue
            offsets = np.cumsum([0] + [len(ids) for ids, _ in queries])
            for (decoding, finished), start, stop in zip(active, offsets[:-1], offsets[1:]):
                if finished.done():
                    continue
                try:
                    if decoding.advance(logits[start:stop]):
                        finished.set_result(None)
                except Exception as error:  # noqa: BLE001 - fails this request alone
                    finished.set_exception(error)

    def _inputs(
        self, active: list[tuple[Decoding, asyncio.Future[None]]], queries: list[tuple[np.ndarray, np.ndarray]]
    ) -> dict[str, np.ndarray]:
        """The decoder step's inputs for every query: prefixes right-padded to the longest, sources to the widest."""
        rows = sum(len(ids) for ids, _ in queries)
        prefix = max(ids.shape[1] for ids, _ in queries)
        source = max(decoding.latents.mask.shape[1] for decoding, _ in active)
        hidden_size = active[0][0].latents.hidden_states.shape[2]
        decoder_ids = np.full((rows, prefix), self._pad_id, dtype=np.int64)
        decoder_mask = np.zeros((rows, prefix), dtype=np.int64)
        encoder_hidden_states = np.zeros((rows, source, hidden_size), dtype=np.float32)
        encoder_mask = np.zeros((rows, source), dtype=np.int64)
        start = 0
        for (decoding, _), (ids, owners) in zip(active, queries):
            stop, length, width = start + len(ids), ids.shape[1], decoding.latents.mask.shape[1]
            decoder_ids[start:stop, :length] = ids
            decoder_mask[start:stop, :length] = 1
            encoder_hidden_states[start:stop, :width] = decoding.latents.hidden_states[owners]
            encoder_mask[start:stop, :width] = decoding.latents.mask[owners]
            start = stop
        return {
            "decoder_ids": decoder_ids,
            "decoder_mask": decoder_mask,
            "encoder_hidden_states": encoder_hidden_states,
            "encoder_mask": encoder_mask,
        }
