"""The same esm2nv weights in torch eager, as a user without Triton would run them (contenders 3, 4 and 5).

transformers' `EsmModel` and `EsmTokenizer` read `checkpoints/esm2nv`, the
checkpoint the ONNX graph in `model_repository/esm2nv` was exported from; the
embedding is the service's: the mean of the final hidden states over the
residues (not <cls>, <eos> or padding).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import EsmModel, EsmTokenizer

CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "esm2nv"


class TorchEmbedder:
    """Tokenize, pad to the longest, run the encoder, pool over residues: one batch per call."""

    def __init__(self, checkpoint: Path = CHECKPOINT) -> None:
        self.tokenizer = EsmTokenizer.from_pretrained(checkpoint)
        self.model = EsmModel.from_pretrained(checkpoint, add_pooling_layer=False).eval()

    @torch.inference_mode()
    def embed(self, sequences: list[str]) -> np.ndarray:
        """[batch, hidden] float32 embeddings in input order."""
        batch = self.tokenizer(sequences, return_tensors="pt", padding=True)
        hidden = self.model(**batch).last_hidden_state
        residues = batch["attention_mask"].clone()
        residues[:, 0] = 0  # <cls>
        residues[torch.arange(len(sequences)), batch["attention_mask"].sum(dim=1) - 1] = 0  # <eos>
        weights = residues.unsqueeze(-1).to(hidden.dtype)
        return ((hidden * weights).sum(dim=1) / weights.sum(dim=1)).numpy()
