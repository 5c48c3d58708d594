"""Reductions from per-token hidden states to one vector per sequence."""

from __future__ import annotations

import numpy as np


def mean_pool(hidden_states: np.ndarray, residue_mask: np.ndarray) -> np.ndarray:
    """Mean of `hidden_states` [batch, length, dim] over the positions where `residue_mask` is true.

    BioNeMo defines a protein embedding as the mean over residues only, so the
    mask excludes special tokens and padding.
    """
    weights = residue_mask.astype(hidden_states.dtype)[:, :, None]
    totals = (hidden_states * weights).sum(axis=1)
    return totals / weights.sum(axis=1)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Scale each row to unit length (rows of zeros stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)
