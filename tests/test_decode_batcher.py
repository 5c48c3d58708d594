"""The continuous batcher of decoder steps on its own: joining, leaving, padding and failures.

The step here is a plain function of the inputs the batcher builds (the end-to-end
tests run it against Triton's decoder): logits that favour the token after a
row's last one, so that every row's answer is known in advance.
"""

from __future__ import annotations

import asyncio

import numpy as np

from serving.decode_batcher import DecodeBatcher, Latents

PAD, VOCAB, END = 0, 12, 11


def counting_step(calls: list[dict[str, np.ndarray]]) -> object:
    """Logits favouring (last token + 1) of each row, read where `decoder_mask` says the row ends."""

    async def step(arrays: dict[str, np.ndarray]) -> np.ndarray:
        calls.append(arrays)
        await asyncio.sleep(0)
        last = arrays["decoder_ids"][np.arange(len(arrays["decoder_ids"])), arrays["decoder_mask"].sum(axis=1) - 1]
        return np.eye(VOCAB, dtype=np.float32)[np.minimum(last + 1, END)]

    return step


class Counting:
    """Rows that count up from `start` to END, one token per step."""

    def __init__(self, starts: list[int], source_width: int) -> None:
        self.latents = Latents(np.ones((len(starts), source_width, 2), np.float32), np.ones((len(starts), source_width)))
        self.ids = np.array(starts)[:, None]
        self.live = np.arange(len(starts))

    def query(self) -> tuple[np.ndarray, np.ndarray]:
        return self.ids[self.live], self.live

    def advance(self, logits: np.ndarray) -> bool:
        step = np.full(len(self.ids), PAD)
        step[self.live] = logits.argmax(axis=1)
        self.ids = np.concatenate((self.ids, step[:, None]), axis=1)
        self.live = self.live[step[self.live] != END]
        return not self.live.size


def test_requests_in_flight_share_steps_and_leave_when_done() -> None:
    calls: list[dict[str, np.ndarray]] = []
    batcher = DecodeBatcher(counting_step(calls), PAD)
    short, long = Counting([9, 10], source_width=3), Counting([1], source_width=5)

    async def run() -> None:
        first = asyncio.create_task(batcher.decode(long))
        while not calls:  # `short` arrives while `long` is in its first step
            await asyncio.sleep(0)
        await asyncio.gather(batcher.decode(short), first)

    asyncio.run(run())
    assert long.ids.tolist() == [list(range(1, 12))]
    assert short.ids.tolist() == [[9, 10, 11], [10, 11, PAD]]
    assert len(calls) == 10  # `long` needs ten steps; `short` rode along, never a step of its own
    shared = next(call for call in calls if len(call["decoder_ids"]) == 3)  # the step `short` joined
    steps = shared["decoder_ids"].shape[1]
    assert steps > 1 and shared["decoder_mask"].tolist() == [[1] * steps] + [[1] + [0] * (steps - 1)] * 2
    assert shared["encoder_mask"].tolist() == [[1] * 5, [1, 1, 1, 0, 0], [1, 1, 1, 0, 0]]


def test_a_failed_step_fails_every_request_in_it_and_the_next_ones_still_run() -> None:
    failing = True

    async def step(arrays: dict[str, np.ndarray]) -> np.ndarray:
        if failing:
            raise ConnectionError("Triton away")
        return np.eye(VOCAB, dtype=np.float32)[np.full(len(arrays["decoder_ids"]), END)]

    batcher = DecodeBatcher(step, PAD)

    async def run() -> list[object]:
        nonlocal failing
        outcomes = await asyncio.gather(
            batcher.decode(Counting([1], 2)), batcher.decode(Counting([2], 2)), return_exceptions=True
        )
        failing = False
        later = Counting([3], 2)
        await batcher.decode(later)
        return [*outcomes, later.ids.tolist()]

    first, second, later = asyncio.run(run())
    assert isinstance(first, ConnectionError) and isinstance(second, ConnectionError)
    assert later == [[3, END]]


def test_a_request_that_breaks_fails_alone() -> None:
    class Broken(Counting):
        def advance(self, logits: np.ndarray) -> bool:
            raise ValueError("broken decoding")

    batcher = DecodeBatcher(counting_step([]), PAD)
    healthy = Counting([8], 2)

    async def run() -> list[object]:
        return await asyncio.gather(batcher.decode(Broken([1], 2)), batcher.decode(healthy), return_exceptions=True)

    broken, fine = asyncio.run(run())
    assert isinstance(broken, ValueError) and fine is None
    assert healthy.ids.tolist() == [[8, 9, 10, 11]]
