"""Post-processing of embeddings (the encoder graph pools them: bionemo_serving/exporter/exportable.py EncoderGraph)."""

from __future__ import annotations

import numpy as np


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Scale each vector (along the last axis) to unit length (vectors of zeros stay zero)."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)
