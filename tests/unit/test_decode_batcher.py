"""The continuous batcher of decoder steps on its own: joining, leaving, cache ids and releases, failures.

The step here stands in for Triton's decoder model and keeps what it keeps, per
row id, a row's history (the real one keeps keys and values); the end-to-end
tests run the real one. Its logits favour the token after a row's newest, so
every row counts up by one per step and its answer is known in advance.
"""

from __future__ import annotations

import asyncio

import numpy as np

from bionemo_serving.engine.decode_batcher import DecodeBatcher, Latents, StepRows

PAD, VOCAB, END, HIDDEN = 0, 12, 11, 2


class FakeDecoder:
    """Each row's tokens kept under its id, extended from its parent's; released ids forgotten."""

    def __init__(self) -> None:
        self.rows: dict[int, list[int]] = {}
        self.calls: list[dict[str, np.ndarray]] = []

    async def __call__(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        self.calls.append(arrays)
        await asyncio.sleep(0)
        assert (arrays["parent_ids"] < 0).sum() == len(arrays["encoder_hidden_states"]) == len(arrays["encoder_mask"])
        histories = [
            ([] if parent < 0 else self.rows[parent]) + [token]
            for parent, token in zip(arrays["parent_ids"].tolist(), arrays["tokens"].tolist())
        ]
        for history in histories:  # a row extended from another row's cache would not count up by one
            assert history == list(range(history[0], history[0] + len(history)))
        for row_id in arrays["released_ids"].tolist():
            del self.rows[row_id]
        assert not self.rows.keys() & set(arrays["row_ids"].tolist())
        self.rows.update(zip(arrays["row_ids"].tolist(), histories))
        return np.eye(VOCAB, dtype=np.float32)[np.minimum(arrays["tokens"] + 1, END)]


class Counting:
    """Rows that count up from `start` to END, one token per step."""

    def __init__(self, starts: list[int], source_width: int) -> None:
        self.latents = Latents(np.ones((len(starts), source_width, HIDDEN), np.float32), np.ones((len(starts), source_width)))
        self.ids = np.array(starts)[:, None]
        self.live = np.arange(len(starts))
        self.parents = np.full(len(starts), -1)

    def query(self) -> StepRows:
        return StepRows(self.ids[self.live, -1], self.parents, self.live)

    def advance(self, logits: np.ndarray) -> bool:
        step = np.full(len(self.ids), PAD)
        step[self.live] = logits.argmax(axis=1)
        self.ids = np.concatenate((self.ids, step[:, None]), axis=1)
        continuing = step[self.live] != END
        self.live, self.parents = self.live[continuing], np.flatnonzero(continuing)
        return not self.live.size


def test_requests_in_flight_share_steps_leave_when_done_and_release_their_caches() -> None:
    decoder = FakeDecoder()
    batcher = DecodeBatcher(decoder, HIDDEN, "megamolbart")
    short, long = Counting([9, 10], source_width=3), Counting([1], source_width=5)

    async def run() -> None:
        first = asyncio.create_task(batcher.decode(long))
        while not decoder.calls:  # `short` arrives while `long` is in its first step
            await asyncio.sleep(0)
        await asyncio.gather(batcher.decode(short), first)

    asyncio.run(run())
    assert long.ids.tolist() == [list(range(1, 12))]
    assert short.ids.tolist() == [[9, 10, 11], [10, 11, PAD]]
    # `long` needs ten steps, then one call releases its caches; `short` rode along, never a step of its own.
    assert len(decoder.calls) == 11 and len(decoder.calls[-1]["row_ids"]) == 0
    assert decoder.rows == {}  # every cache released
    # `short`'s two rows start beside one of `long`'s, from their own sources; the call releases `long`'s last row.
    at, joined = next((at, call) for at, call in enumerate(decoder.calls) if len(call["row_ids"]) == 3)
    assert at > 0 and joined["tokens"].tolist() == [1 + at, 9, 10] and joined["parent_ids"].tolist()[1:] == [-1, -1]
    assert joined["encoder_mask"].tolist() == [[1] * 3] * 2 and joined["encoder_hidden_states"].shape == (2, 3, HIDDEN)
    assert joined["released_ids"].tolist() == decoder.calls[at - 1]["row_ids"].tolist()


def test_a_failed_step_fails_every_request_in_it_and_the_next_ones_still_run() -> None:
    failing = True

    async def step(arrays: dict[str, np.ndarray]) -> np.ndarray:
        if failing:
            raise ConnectionError("Triton away")
        return np.eye(VOCAB, dtype=np.float32)[np.full(len(arrays["row_ids"]), END)]

    batcher = DecodeBatcher(step, HIDDEN, "megamolbart")

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


def test_a_request_that_breaks_fails_alone_and_a_gone_client_releases_its_rows() -> None:
    class Broken(Counting):
        def advance(self, logits: np.ndarray) -> bool:
            raise ValueError("broken decoding")

    decoder = FakeDecoder()
    batcher = DecodeBatcher(decoder, HIDDEN, "megamolbart")
    healthy = Counting([5], 2)

    async def run() -> list[object]:
        gone = asyncio.create_task(batcher.decode(Counting([1, 2], 2)))
        while len(decoder.calls) < 2:
            await asyncio.sleep(0)
        gone.cancel()
        return await asyncio.gather(batcher.decode(Broken([1], 2)), batcher.decode(healthy), return_exceptions=True)

    broken, fine = asyncio.run(run())
    assert isinstance(broken, ValueError) and fine is None
    assert healthy.ids.tolist() == [[5, 6, 7, 8, 9, 10, 11]]
    assert decoder.rows == {}
