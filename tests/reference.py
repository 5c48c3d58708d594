"""The independent reference: transformers models and tokenizers loaded from the same checkpoint folders."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, EsmModel, T5EncoderModel

from model_catalog import MODELS, Architecture

CHECKPOINTS = Path(__file__).resolve().parent.parent / "checkpoints"


class TransformersReference:
    """One sequence at a time, no padding: nothing shared with the service's code path."""

    def __init__(self, model_name: str) -> None:
        self.folder = CHECKPOINTS / model_name
        self.architecture = MODELS[model_name].architecture

    @cached_property
    def model(self) -> torch.nn.Module:
        if self.architecture is Architecture.T5_ENCODER:
            return T5EncoderModel.from_pretrained(self.folder).eval()
        return EsmModel.from_pretrained(self.folder, add_pooling_layer=False).eval()

    @cached_property
    def tokenizer(self):  # noqa: ANN201 - a transformers tokenizer
        return AutoTokenizer.from_pretrained(self.folder)

    @property
    def residues(self) -> slice:
        """Residue positions among the tokens: ESM wraps them in <cls> ... <eos>, ProtT5 ends with </s>."""
        return slice(0, -1) if self.architecture is Architecture.T5_ENCODER else slice(1, -1)

    def hidden_states(self, sequence: str) -> np.ndarray:
        """[tokens, dim] final hidden states of one unpadded sequence."""
        if self.architecture is Architecture.T5_ENCODER:
            text = " ".join("X" if residue in "UZOB" else residue for residue in sequence.upper())
        else:
            text = sequence.upper()
        tokens = self.tokenizer(text, return_tensors="pt")
        with torch.inference_mode():
            return self.model(**tokens).last_hidden_state[0].numpy()

    def mean_embedding(self, sequence: str) -> np.ndarray:
        return self.hidden_states(sequence)[self.residues].mean(axis=0)
