"""The run's batches in order, epoch after epoch, from any point of it, made ahead of the training step by workers.

Making a batch costs RDKit time (random SMILES: about 30 ms for 128 molecules), as much as a GPU step; worker
processes hide it. Each batch depends only on its seed (`denoising.batch_seed`), never on which process made it or
on how many, so the workers change speed, not results.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.pool import AsyncResult

from bionemo_serving.preprocessing.smiles import SmilesTokenizer
from bionemo_serving.training.denoising import DenoisingBatch, Noising, batch_seed, epoch_batches, make_batch
from bionemo_serving.training.moses_data import TrainingData
from bionemo_serving.training.recipe import Recipe

PREFETCH_PER_WORKER = 4


@dataclass(frozen=True)
class PlacedBatch:
    """A batch and its place in the run: the `position`-th batch of `epoch`, which has `epoch_length` batches."""

    epoch: int
    position: int
    epoch_length: int
    batch: DenoisingBatch


class BatchStream:
    """The batches from (`epoch`, `position`) on; with `workers` > 0, made ahead by that many forked processes."""

    def __init__(
        self, data: TrainingData, recipe: Recipe, tokenizer: SmilesTokenizer, epoch: int, position: int, workers: int
    ) -> None:
        self.data, self.recipe, self.tokenizer = data, recipe, tokenizer
        self.noising = Noising(recipe.mask_prob, recipe.span_lambda, recipe.randomize_prob, recipe.max_tokens)
        self.jobs = self._jobs(epoch, position)
        # fork: the workers run numpy and RDKit only, and start without re-importing torch.
        self.pool = multiprocessing.get_context("fork").Pool(workers, _ignore_interrupts) if workers else None
        self.pending: deque[tuple[int, int, int, AsyncResult[DenoisingBatch]]] = deque()
        self.ahead = workers * PREFETCH_PER_WORKER

    def _jobs(self, epoch: int, position: int) -> Iterator[tuple[int, int, int, list[str]]]:
        token_counts = self.data.molecules.token_counts[self.data.training]
        while True:
            batches = epoch_batches(
                token_counts, self.recipe.batch_size, self.recipe.pool_batches, self.recipe.seed, epoch
            )
            for index in range(position, len(batches)):
                smiles = [self.data.molecules.smiles[self.data.training[row]] for row in batches[index]]
                yield epoch, index, len(batches), smiles
            epoch, position = epoch + 1, 0

    def __iter__(self) -> Iterator[PlacedBatch]:
        return self

    def __next__(self) -> PlacedBatch:
        if self.pool is None:
            epoch, position, length, smiles = next(self.jobs)
            return PlacedBatch(epoch, position, length, self._make(epoch, position, smiles))
        while len(self.pending) < self.ahead:
            epoch, position, length, smiles = next(self.jobs)
            arguments = (smiles, batch_seed(self.recipe.seed, epoch, position), self.noising, self.tokenizer)
            self.pending.append((epoch, position, length, self.pool.apply_async(make_batch, arguments)))
        epoch, position, length, made = self.pending.popleft()
        return PlacedBatch(epoch, position, length, made.get())

    def _make(self, epoch: int, position: int, smiles: list[str]) -> DenoisingBatch:
        return make_batch(smiles, batch_seed(self.recipe.seed, epoch, position), self.noising, self.tokenizer)

    def close(self) -> None:
        """Stop the workers (the batches they made ahead are dropped: a resumed run makes them again)."""
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def _ignore_interrupts() -> None:
    """Ctrl-C reaches the whole process group: the training process saves and stops, and a worker killed by it
    would leave a batch the training process waits for forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
