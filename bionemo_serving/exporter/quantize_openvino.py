"""INT8 graphs for OpenVINO by NNCF, held to the same accuracy gate as onnxruntime's (exporter/quantize.py).

Two tries, fastest first:
- static INT8: weights per channel, activations per tensor with ranges calibrated on proteins apart from the gate's,
  SmoothQuant first (NNCF's transformer preset), the language-model head FP32. The INT8 path where the CPU has VNNI
  or AMX; on AVX2 alone it ran esm2nv slower than FP32 (8M, AMD EPYC: 8 x 256 in 0.74 s against 0.61 s) and failed
  the gate at 8M and 150M (random-init: worst embedding cosine 0.980 and 0.980, 0.994 and 0.997 without SmoothQuant);
- INT8 weights only, activations FP32: a quarter of the weights' bytes, within the gate (0.99973, 0.99964), about
  FP32's speed (150M, 8 x 256: 0.90x OpenVINO's FP32).
The IR that passes takes the FP32 IR's place, and `runtimes.choice` times it against onnxruntime's INT8 graph where
OpenVINO is timed at all (below runtimes.engines.MAPPED_FROM_MIB of shared weights: it copies them into each stub).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from bionemo_serving.exporter.quantize import (
    KEPT_FP32,
    Answers,
    GateReport,
    embedding_feeds,
    gate,
    gate_answers,
    random_proteins,
    scan_feeds,
)
from bionemo_serving.model_catalog import GraphRole, ModelDescription
from bionemo_serving.runtimes.engines import OpenVinoEngine

CALIBRATION_SEED = 38
"""Calibration proteins are drawn apart from the gate's (quantize.GATE_SEED)."""
CALIBRATION_LENGTHS = ((12, 40, 90, 150), (260, 70, 120, 30), (200, 60, 100, 180))
"""The encoder's calibration batches (each protein also with a share masked); the language model's are the first
batch of the scan of each batch's first protein."""


@dataclass(frozen=True)
class NncfRecipe:
    """How one try quantizes a graph with NNCF."""

    weights_only: bool = False

    def __str__(self) -> str:
        if self.weights_only:
            return "NNCF INT8 weights only, activations FP32"
        return "NNCF static INT8 (SmoothQuant, weights per channel, activations per tensor, calibrated)"


RECIPES = (NncfRecipe(), NncfRecipe(weights_only=True))


def quantize_openvino_gated(description: ModelDescription, role: GraphRole, ir: Path, expected: Answers) -> GateReport:
    """Quantize the FP32 IR `ir` (`<graph>.openvino.xml` and its `.bin`) try after try until one passes the gate
    against the FP32 graph's answers (`expected`); the passing IR replaces it. The last try's report where none does
    (`ir` left FP32: the caller leaves OpenVINO out)."""
    import openvino

    core = openvino.Core()
    candidate = ir.with_name(f"{ir.stem}.int8.xml")
    for recipe in RECIPES:
        model = _quantized(recipe, core.read_model(str(ir)), description, role)
        openvino.save_model(model, str(candidate), compress_to_fp16=False)
        report = gate(role, expected, gate_answers(description, role, OpenVinoEngine(candidate)), recipe)
        if report.passed:
            candidate.replace(ir)
            candidate.with_suffix(".bin").replace(ir.with_suffix(".bin"))
            return report
    candidate.unlink()
    candidate.with_suffix(".bin").unlink()
    return report


def _quantized(recipe: NncfRecipe, model, description: ModelDescription, role: GraphRole):  # noqa: ANN001, ANN202
    import nncf

    nncf.set_log_level(logging.WARNING)  # its INFO tables of every try would bury the export's own progress
    kept = nncf.IgnoredScope(patterns=[f".*{name}.*" for name in (*KEPT_FP32, "embeddings")], validate=False)
    if recipe.weights_only:
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM, ignored_scope=kept)
    inputs = [tensor.get_any_name() for tensor in model.inputs]
    feeds = [{name: batch[name] for name in inputs} for batch in _calibration(description, role)]
    return nncf.quantize(
        model, nncf.Dataset(feeds), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(feeds), ignored_scope=kept
    )


def _calibration(description: ModelDescription, role: GraphRole) -> list[dict]:
    batches = [random_proteins(lengths, CALIBRATION_SEED + index) for index, lengths in enumerate(CALIBRATION_LENGTHS)]
    if role is GraphRole.ENCODER:
        return [embedding_feeds(description, proteins) for proteins in batches]
    return [scan_feeds(description, proteins[0])[0] for proteins in batches]
