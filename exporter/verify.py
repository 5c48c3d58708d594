"""The correctness gate: an exported graph must reproduce torch on padded mixed-length batches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime
import torch

from exporter.graph_inputs import GraphInputs
from model_catalog import GraphSpec

DEFAULT_TOLERANCE = 1e-4


class ParityError(RuntimeError):
    """The exported model disagrees with torch beyond the tolerance; nothing was written."""


@dataclass(frozen=True)
class ParityReport:
    max_abs_diff: float
    batches: int
    values_compared: int


def check_parity(
    module: torch.nn.Module,
    onnx_path: Path,
    graph: GraphSpec,
    batches: list[GraphInputs],
    name: str,
    tolerance: float = DEFAULT_TOLERANCE,
) -> ParityReport:
    """Compare onnxruntime with torch where outputs matter; raise `ParityError` past `tolerance`."""
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    worst, compared = 0.0, 0
    for batch in batches:
        (exported,) = session.run([graph.output.name], batch.feeds)
        with torch.inference_mode():
            reference = module(**{key: torch.from_numpy(array) for key, array in batch.feeds.items()}).numpy()
        where = batch.compared if batch.compared is not None else np.ones(exported.shape[:1], dtype=bool)
        difference = np.abs(exported[where] - reference[where])
        worst, compared = max(worst, float(difference.max())), compared + difference.size
    if not worst <= tolerance:
        raise ParityError(
            f"{name}: onnxruntime differs from torch by {worst:.3g} (tolerance {tolerance:.1g}) "
            f"on padded batches of mixed lengths; the model was not written"
        )
    return ParityReport(max_abs_diff=worst, batches=len(batches), values_compared=compared)
