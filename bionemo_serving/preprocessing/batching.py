"""Right-padded token batches, the form every Triton encoder takes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenBatch:
    """A right-padded batch, ready for the Triton model."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    residue_mask: np.ndarray
    """True exactly at content positions (residues, SMILES tokens): not special tokens, not padding."""

    def model_inputs(self, pooling_mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The arrays the encoder takes, keyed by their tensor names in `model_catalog.ENCODER`.

        The embeddings average over `pooling_mask` (default: the residues).
        """
        pooling_mask = self.residue_mask if pooling_mask is None else pooling_mask
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "pooling_mask": pooling_mask.astype(np.int64),
        }


def pad_batch(encoded: list[np.ndarray], pad_id: int, prefix: int, suffix: int, width: int | None = None) -> TokenBatch:
    """Right-pad token id rows to `width` (default: the longest); `prefix` and `suffix` special tokens wrap each row."""
    width = width or max(len(ids) for ids in encoded)
    input_ids = np.full((len(encoded), width), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(encoded), width), dtype=np.int64)
    residue_mask = np.zeros((len(encoded), width), dtype=bool)
    for row, ids in enumerate(encoded):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = 1
        residue_mask[row, prefix : len(ids) - suffix] = True
    return TokenBatch(input_ids, attention_mask, residue_mask)


SMALLEST_BUCKET = 16


def bucket_width(longest: int, ceiling: int) -> int:
    """The width to pad a row of `longest` tokens to: the next of 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, ...

    Rows padded to the same bucket have the same shape, which is what lets
    Triton's dynamic batcher merge concurrent requests into one model run.
    Four buckets per doubling keep the padding under a quarter of the row;
    `ceiling` (the model's longest input) caps it.
    """
    width = SMALLEST_BUCKET
    while width < longest:
        width += (1 << (width.bit_length() - 1)) // 4  # a quarter of the power of two at or below width
    return max(longest, min(width, ceiling))


def bucketed_chunks(
    lengths: list[int], ceiling: int, max_batch_size: int, exact: bool = False
) -> list[tuple[int, list[int]]]:
    """The rows of a request grouped by length bucket, as (width, row indices) of at most `max_batch_size` rows.

    A request of proteins of 60 and 900 residues padded to one width would spend
    most of its compute on padding; per bucket, at most a quarter is padding.
    `exact` groups rows by their own length: no padding at all, for requests of many rows of one length.
    """
    by_width: dict[int, list[int]] = {}
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        width = lengths[index] if exact else bucket_width(lengths[index], ceiling)
        by_width.setdefault(width, []).append(index)
    return [
        (width, rows[start : start + max_batch_size])
        for width, rows in by_width.items()
        for start in range(0, len(rows), max_batch_size)
    ]
