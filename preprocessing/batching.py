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

    def model_inputs(self) -> dict[str, np.ndarray]:
        """The arrays the encoder takes, keyed by their tensor names in `model_catalog.TOKEN_INPUTS`."""
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}


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
    """The width to pad a batch to whose longest row has `longest` tokens: the next of 16, 24, 32, 48, 64, 96, ...

    Requests padded to the same bucket have the same shape, which is what lets
    Triton's dynamic batcher merge concurrent requests into one model run. Each
    bucket is 1.33x or 1.5x the one before, so the extra padding is at most half
    the longest row; `ceiling` (the model's longest input) caps it.
    """
    width = SMALLEST_BUCKET
    while width < longest:
        width = width * 3 // 2 if width & (width - 1) == 0 else width * 4 // 3  # 16 -> 24 -> 32 -> 48 -> 64 ...
    return max(longest, min(width, ceiling))
