"""MegaMolBART's denoising examples and the order batches of them come in.

An example is BioNeMo MegaMolBART's: the encoder reads the molecule's SMILES tokens with random spans each replaced
by one `<MASK>` (BART's text infilling, as MolBART's `span` mask scheme: a span starts at a token with `mask_prob`,
its length is Poisson(`span_lambda`), a length of 0 inserts a `<MASK>`), and the decoder, teacher-forced from `^`,
must write the whole molecule and then `&`. With `randomize_prob` the encoder reads a random SMILES of the molecule
instead (RDKit's doRandom), still against the canonical SMILES as target, so that the encoder's output depends on
the molecule and not on how it is spelled.

Every random draw of a batch comes from its own seed (`batch_seed`), so a batch is the same whether it is made in
the training process or in a worker, and a resumed run makes exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rdkit import Chem

from bionemo_serving.preprocessing.smiles import FIRST_CHEMISTRY_ID, SmilesTokenizer

MASK = "<MASK>"
IGNORED_LABEL = -100
"""Label of padding: cross entropy skips it (torch's default ignore_index)."""


@dataclass(frozen=True)
class Noising:
    """How an encoder input is made from a molecule."""

    mask_prob: float
    span_lambda: float
    randomize_prob: float
    max_tokens: int
    """A random SMILES longer than this (or with a token outside the vocabulary) is replaced by the canonical one."""


@dataclass(frozen=True)
class DenoisingBatch:
    """Right-padded arrays of one batch; `labels` are `decoder_ids` shifted left, `&` last, padding ignored."""

    encoder_ids: np.ndarray
    encoder_mask: np.ndarray
    decoder_ids: np.ndarray
    labels: np.ndarray

    @property
    def size(self) -> int:
        return len(self.encoder_ids)


def batch_seed(seed: int, epoch: int, position: int) -> np.random.SeedSequence:
    """The seed of the `position`-th batch of `epoch`: its masks, its random SMILES and its latent noise."""
    return np.random.SeedSequence((seed, epoch, position))


def noise_seed(seed: int, epoch: int, position: int) -> int:
    """The torch seed of the same batch's training step (its latent noise), a stream apart from `batch_seed`'s."""
    return int(np.random.SeedSequence((seed, epoch, position, 1)).generate_state(1)[0])


def epoch_batches(
    token_counts: np.ndarray, batch_size: int, pool_batches: int, seed: int, epoch: int
) -> list[np.ndarray]:
    """The batches of one epoch, as positions into `token_counts`: a shuffle of everything, sorted by length within
    pools of `pool_batches` batches (little padding, yet each batch a random draw of its length), in random order."""
    rng = np.random.default_rng((seed, epoch))
    order = rng.permutation(len(token_counts))
    pool_size = batch_size * pool_batches
    batches = []
    for start in range(0, len(order), pool_size):
        pool = order[start : start + pool_size]
        pool = pool[np.argsort(token_counts[pool], kind="stable")]
        batches += [pool[offset : offset + batch_size] for offset in range(0, len(pool), batch_size)]
    return [batches[index] for index in rng.permutation(len(batches))]


def make_batch(
    smiles: list[str], seed: np.random.SeedSequence, noising: Noising, tokenizer: SmilesTokenizer
) -> DenoisingBatch:
    """The denoising batch of `smiles` (canonical SMILES the tokenizer takes whole, as `moses_data` keeps them)."""
    rng = np.random.default_rng(seed)
    mask_id = tokenizer.ids[MASK]
    sources, targets = [], []
    for molecule in smiles:
        target = [tokenizer.ids[token] for token in tokenizer.split(molecule)]
        source = target
        if rng.random() < noising.randomize_prob:
            source = _random_spelling(molecule, int(rng.integers(2**31)), tokenizer, noising.max_tokens) or target
        sources.append(_span_masked(source, rng, noising.mask_prob, noising.span_lambda, mask_id))
        targets.append(target)
    encoder_ids = _padded(sources, tokenizer.pad_id)
    decoder_ids = _padded([[tokenizer.begin_id, *target] for target in targets], tokenizer.pad_id)
    labels = _padded([[*target, tokenizer.end_id] for target in targets], IGNORED_LABEL)
    return DenoisingBatch(encoder_ids, (encoder_ids != tokenizer.pad_id).astype(np.int64), decoder_ids, labels)


def _random_spelling(smiles: str, seed: int, tokenizer: SmilesTokenizer, max_tokens: int) -> list[int] | None:
    """Token ids of a random SMILES of the molecule (RDKit's doRandom, seeded); None where it cannot be read whole."""
    molecule = Chem.MolFromSmiles(smiles)
    if molecule is None:
        return None
    tokens = tokenizer.split(Chem.MolToRandomSmilesVect(molecule, 1, randomSeed=seed)[0])
    ids = [tokenizer.ids.get(token, -1) for token in tokens]
    return ids if len(ids) <= max_tokens and min(ids) >= FIRST_CHEMISTRY_ID else None


def _span_masked(
    ids: list[int], rng: np.random.Generator, mask_prob: float, span_lambda: float, mask_id: int
) -> list[int]:
    starts = rng.random(len(ids)) < mask_prob
    masked, position = [], 0
    while position < len(ids):
        if starts[position]:
            masked.append(mask_id)
            length = int(rng.poisson(span_lambda))
            if length == 0:  # an insertion: the token stays after its <MASK>
                masked.append(ids[position])
                length = 1
            position += length
        else:
            masked.append(ids[position])
            position += 1
    return masked


def _padded(rows: list[list[int]], pad: int) -> np.ndarray:
    padded = np.full((len(rows), max(map(len, rows))), pad, dtype=np.int64)
    for index, row in enumerate(rows):
        padded[index, : len(row)] = row
    return padded
