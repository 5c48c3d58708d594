"""The correctness gate: an exported model must reproduce torch on padded mixed-length batches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime
import torch

from model_catalog import ModelDescription
from preprocessing import tokenizer_for
from preprocessing.protein_tokenizer import RESIDUES

DEFAULT_TOLERANCE = 1e-4


class ParityError(RuntimeError):
    """The exported model disagrees with torch beyond the tolerance; nothing was written."""


@dataclass(frozen=True)
class ParityReport:
    max_abs_diff: float
    batches: int
    tokens_compared: int


def _verification_batches(description: ModelDescription, seed: int) -> list[list[str]]:
    """Random sequences of very different lengths, so every batch carries heavy padding."""
    rng = np.random.default_rng(seed)
    longest = min(description.max_residues, 300)
    length_sets = ([1, 9, longest // 4, longest], [longest // 2], [5, 3, 17])
    return [["".join(rng.choice(list(RESIDUES), size=length)) for length in lengths] for lengths in length_sets]


def check_parity(
    module: torch.nn.Module,
    onnx_path: Path,
    description: ModelDescription,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
) -> ParityReport:
    """Compare onnxruntime with torch at every real (unpadded) token; raise `ParityError` past `tolerance`."""
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    tokenizer = tokenizer_for(description)
    worst, tokens = 0.0, 0
    batches = _verification_batches(description, seed)
    for sequences in batches:
        batch = tokenizer.batch(sequences)
        feeds = batch.model_inputs()
        (exported,) = session.run([description.output.name], feeds)
        with torch.inference_mode():
            reference = module(**{name: torch.from_numpy(array) for name, array in feeds.items()}).numpy()
        real = batch.attention_mask.astype(bool)
        worst = max(worst, float(np.abs(exported[real] - reference[real]).max()))
        tokens += int(real.sum())
    if not worst <= tolerance:
        raise ParityError(
            f"{description.name}: onnxruntime differs from torch by {worst:.3g} (tolerance {tolerance:.1g}) "
            f"on padded batches of mixed lengths; the model was not written"
        )
    return ParityReport(max_abs_diff=worst, batches=len(batches), tokens_compared=tokens)
