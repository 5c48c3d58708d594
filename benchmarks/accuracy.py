"""The bound a contender's outputs are held to against transformers': the exporter's own, so that a benchmark never
passes what the export would have refused (FP32: its parity gate; INT8: its quantization gate)."""

from __future__ import annotations

from bionemo_serving.exporter.quantize import MIN_COSINE
from bionemo_serving.exporter.verify import TOLERANCES
from bionemo_serving.model_catalog import Precision

FP32_MAX_DIFFERENCE = TOLERANCES[Precision.FP32]
"""Largest |output - transformers'| of an FP32 contender (bionemo_serving/exporter/verify.py)."""
INT8_MIN_COSINE = MIN_COSINE
"""Smallest cosine of an INT8 contender's embedding to transformers' (bionemo_serving/exporter/quantize.py)."""
ESM_CPP_LOGITS_TOLERANCE = 1e-3
"""How far esm-cpp's FP32 logits may be from transformers' (esm-cpp is no export of this project: its logits, of order
10, are held to a bound of their own)."""


def within(precision: str, max_difference: float, worst_cosine: float) -> bool:
    """Whether outputs of `precision` (FP32, INT8) are within the exporter's bound; NaN is not."""
    if precision == Precision.INT8.value:
        return worst_cosine >= INT8_MIN_COSINE
    return max_difference <= FP32_MAX_DIFFERENCE


def bound(precision: str) -> str:
    """The bound of `precision`, as a table shows it (no `|`: it is a markdown cell)."""
    if precision == Precision.INT8.value:
        return f"cosine >= {INT8_MIN_COSINE:g}"
    return f"max abs difference <= {FP32_MAX_DIFFERENCE:g}"
