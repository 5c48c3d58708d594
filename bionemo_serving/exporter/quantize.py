"""INT8 graphs for onnxruntime, and the accuracy gate each must pass against its own FP32 graph to be served.

Weights are quantized per output channel to 8 bits once, at export; activations per tensor at run time
(onnxruntime's dynamic quantization: no calibration set, so a user's checkpoint needs nothing but itself). Only the
matrix products with a weight operand are quantized: attention's products of two activations, the embeddings and the
language-model head stay FP32, as esm.cpp keeps them. Where the CPU lacks VNNI, onnxruntime's u8 x s8 kernels can
saturate their 16-bit intermediate sums: the weights then use 7 bits (`reduce_range`), as onnxruntime advises, and
where that fails the gate, uint8 weights, whose u8 x u8 kernels do not saturate (`recipes`). Before that, the first
layer, then the first and last, stay FP32: the first layer was the most sensitive (esm2nv 8M on an AVX2 EPYC: worst
cosine 0.99878 all INT8, 0.99936 with layer 0 in FP32, 0.99886 with the last).

The gate runs the checkpoint being exported, on proteins of mixed lengths, with and without <mask>:
- encoder: every embedding's cosine similarity to FP32's at least MIN_COSINE;
- language model: the deep mutational scan (masked marginals) of the gate proteins, Spearman at least MIN_SPEARMAN
  against FP32's, and their pseudo-perplexity within MAX_PPPL_CHANGE of FP32's.
A graph that fails any figure is served in FP32 and the export report says which figure failed and by how much.
OpenVINO's file of an INT8 graph is quantized by NNCF and held to the same gate (exporter/quantize_openvino.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from bionemo_serving.model_catalog import SCORED_AMINO_ACIDS, GraphRole, ModelDescription
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.runtimes.engines import Engine, Runtime, open_engine

QUANTIZED_ROLES = (GraphRole.ENCODER, GraphRole.LANGUAGE_MODEL)
"""The graphs INT8 is asked of. The layers and contacts graphs (asked for rarely, untimed) stay FP32: no gate is
defined for their outputs."""
MIN_COSINE = 0.999
MIN_SPEARMAN = 0.99
MAX_PPPL_CHANGE = 0.01
"""Relative: |PPPL(INT8) / PPPL(FP32) - 1|."""
KEPT_FP32 = ("lm_head",)
"""ONNX node names holding these stay FP32 (the language-model head, as in esm.cpp)."""
GATE_LENGTHS = (7, 33, 64, 120, 251)
MASKED_SHARE = 0.15
"""Each gate protein is embedded as it is and with this share of its residues masked."""
SCAN_LENGTHS = (30, 62)
"""The gate proteins scanned: one masked copy per residue."""
GATE_SEED = 0
SCAN_ROWS = 32


def has_vnni(cpuinfo: str | None = None) -> bool:
    """Whether this CPU has int8 dot-product instructions (AVX512-VNNI, AVX-VNNI or AMX)."""
    if cpuinfo is None:
        cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = set(cpuinfo.split())
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})


LAYER_NODE = re.compile(r"/layer\.(\d+)/")
"""How the exported ONNX names a transformer layer's nodes (transformers' module names)."""


@dataclass(frozen=True)
class Recipe:
    """How one try quantizes a graph."""

    unsigned_weights: bool = False
    """uint8 weights (onnxruntime's u8 x u8 kernels, which do not saturate without VNNI), else int8."""
    reduce_range: bool = False
    """int8 weights in 7 bits, for u8 x s8 kernels without VNNI."""
    fp32_layers: tuple[int, ...] = ()
    """Layers kept FP32 for the gate's sake."""

    def __str__(self) -> str:
        weights = "uint8 weights" if self.unsigned_weights else f"int8 weights{' in 7 bits' if self.reduce_range else ''}"
        kept = f", layers {', '.join(map(str, self.fp32_layers))} kept FP32" if self.fp32_layers else ""
        return weights + kept


def recipes(source: Path, vnni: bool) -> list[Recipe]:
    """The tries, fastest first: int8 weights (in 7 bits without VNNI) with no layer, the first, then the first and the
    last kept FP32 (never half of the layers or more: a graph mostly in FP32 is not an INT8 graph); then, without
    VNNI, uint8 weights in 8 bits, whose kernels do not saturate (esm2nv 150M on the AVX2 AMD EPYC: worst cosine
    0.99833 with 7-bit int8 weights, 0.99955 with uint8, which ran 8 x 256 residues in 3.76 s against 3.10 s and
    FP32's 4.47 s)."""
    import onnx

    graph = onnx.load(str(source), load_external_data=False).graph
    layers = sorted({int(found.group(1)) for node in graph.node if (found := LAYER_NODE.search(node.name))})
    kept_layers: list[tuple[int, ...]] = [()]
    for kept in ((layers[0],), (layers[0], layers[-1])) if layers else ():
        if 2 * len(kept) < len(layers):
            kept_layers.append(kept)
    tries = [Recipe(reduce_range=not vnni, fp32_layers=kept) for kept in kept_layers]
    return tries if vnni else [*tries, Recipe(unsigned_weights=True)]


def quantize_onnx(source: Path, destination: Path, recipe: Recipe) -> None:
    """Write `destination`: `source` with its weight matrix products in INT8 (see the module's docstring), but those
    of KEPT_FP32 and of the recipe's FP32 layers."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    kept_names = KEPT_FP32 + tuple(f"/layer.{layer}/" for layer in recipe.fp32_layers)
    kept = [node.name for node in graph.node if any(part in node.name for part in kept_names)]
    quantize_dynamic(
        str(source),
        str(destination),
        weight_type=QuantType.QUInt8 if recipe.unsigned_weights else QuantType.QInt8,
        per_channel=True,
        reduce_range=recipe.reduce_range,
        op_types_to_quantize=["MatMul"],
        nodes_to_exclude=kept,
        extra_options={"MatMulConstBOnly": True},
    )


class QuantizationRecipe(Protocol):
    """How one try quantized a graph (Recipe here, quantize_openvino.NncfRecipe); the gate's report says it."""

    def __str__(self) -> str: ...


@dataclass(frozen=True)
class GateFigure:
    name: str
    value: float
    limit: float
    higher_is_better: bool

    @property
    def passed(self) -> bool:
        return self.value >= self.limit if self.higher_is_better else self.value <= self.limit

    def __str__(self) -> str:
        sign = (">=" if self.passed else "<") if self.higher_is_better else ("<=" if self.passed else ">")
        return f"{self.name} {self.value:.5f} {sign} {self.limit}"


@dataclass(frozen=True)
class GateReport:
    """One graph's INT8 gate: its figures, the recipe they were taken with, and whether INT8 is served."""

    figures: tuple[GateFigure, ...]
    recipe: QuantizationRecipe

    @property
    def passed(self) -> bool:
        return all(figure.passed for figure in self.figures)

    def __str__(self) -> str:
        verdict = "INT8 served" if self.passed else "failed: FP32 served instead"
        return f"INT8 gate {verdict} ({'; '.join(map(str, self.figures))}; {self.recipe})"


def quantize_gated(
    description: ModelDescription,
    role: GraphRole,
    fp32: Path,
    int8: Path,
    expected: Answers,
    first: Recipe | None = None,
) -> GateReport:
    """Write `int8` from `fp32` and gate it against the FP32 graph's answers (`expected`, gate_answers), try after
    try (recipes) until one passes; the last try's report where none does (and `int8` removed).

    `first`, the recipe another graph of the model passed with, is tried first: the language model holds the encoder,
    and quantized by the same recipe its encoder's tensors are the encoder graph's bytes, which the export's one
    weights file then holds once (esm2nv 150M on an AVX2 EPYC: the encoder passed with uint8 weights only, the LM with
    7-bit int8 ones, and the two kept their 0.15 GiB of INT8 encoder weights apart)."""
    tries = recipes(fp32, has_vnni())
    for recipe in [first, *(recipe for recipe in tries if recipe != first)] if first in tries else tries:
        quantize_onnx(fp32, int8, recipe)
        report = gate(role, expected, gate_answers(description, role, open_engine(Runtime.ONNXRUNTIME, int8)), recipe)
        if report.passed:
            return report
    int8.unlink()
    return report


def worst_cosine(first: np.ndarray, second: np.ndarray) -> float:
    """The smallest cosine similarity between the rows of `first` and `second`."""
    cosine = (first * second).sum(-1) / (np.linalg.norm(first, axis=-1) * np.linalg.norm(second, axis=-1))
    return float(cosine.min())


def spearman(first: np.ndarray, second: np.ndarray) -> float:
    """Spearman's rank correlation (float scores: ties are not expected)."""
    ranks = [np.argsort(np.argsort(values)).astype(np.float64) for values in (first, second)]
    return float(np.corrcoef(*ranks)[0, 1])


Answers = tuple[np.ndarray, ...]
"""A graph's answers to the gate: the encoder's embeddings; the language model's mutant scores and wild-type
log-probabilities over the scanned proteins."""


def gate_answers(description: ModelDescription, role: GraphRole, engine: Engine) -> Answers:
    """The graph's answers to the gate, run by `engine` (any runtime's file of the graph)."""
    if role is GraphRole.ENCODER:
        return (_run(engine, "embeddings", embedding_feeds(description, random_proteins(GATE_LENGTHS, GATE_SEED)))[0],)
    return _scan(description, engine)


def gate(role: GraphRole, expected: Answers, got: Answers, recipe: QuantizationRecipe) -> GateReport:
    """The gate's figures of an INT8 graph's answers (`got`) against its FP32 graph's (`expected`)."""
    if role is GraphRole.ENCODER:
        cosine = worst_cosine(expected[0], got[0])
        return GateReport((GateFigure("embeddings cosine (worst)", cosine, MIN_COSINE, higher_is_better=True),), recipe)
    (expected_scores, expected_wild), (got_scores, got_wild) = expected, got
    pppl_fp32, pppl_int8 = (float(np.exp(-wild.mean())) for wild in (expected_wild, got_wild))
    figures = (
        GateFigure("scan Spearman", spearman(expected_scores, got_scores), MIN_SPEARMAN, higher_is_better=True),
        GateFigure(
            f"pseudo-perplexity change (FP32 {pppl_fp32:.3f})", abs(pppl_int8 / pppl_fp32 - 1), MAX_PPPL_CHANGE,
            higher_is_better=False,
        ),
    )  # fmt: skip
    return GateReport(figures, recipe)


def embedding_feeds(description: ModelDescription, proteins: list[str]) -> dict[str, np.ndarray]:
    """One padded batch of `proteins`, each as it is and with MASKED_SHARE of its residues masked."""
    tokenizer = tokenizer_for(description)
    rng = np.random.default_rng(GATE_SEED + 1)
    rows = []
    for protein in proteins:
        ids = tokenizer.encode(protein)
        masked = ids.copy()
        chosen = rng.choice(len(protein), size=max(1, int(len(protein) * MASKED_SHARE)), replace=False)
        masked[chosen + len(tokenizer.prefix_ids)] = tokenizer.mask_id
        rows += [ids, masked]
    return tokenizer.pad(rows).model_inputs()


def scan_feeds(description: ModelDescription, protein: str) -> list[dict[str, np.ndarray]]:
    """The language model's batches of a masked-marginal scan of `protein`: one copy per residue with it masked, at
    most SCAN_ROWS a batch."""
    tokenizer = tokenizer_for(description)
    ids = tokenizer.encode(protein)
    residues = np.arange(len(protein))
    copies = np.repeat(ids[None], len(protein), axis=0)
    positions = residues + len(tokenizer.prefix_ids)
    copies[residues, positions] = tokenizer.mask_id
    return [
        {
            "input_ids": copies[start : start + SCAN_ROWS],
            "attention_mask": np.ones_like(copies[start : start + SCAN_ROWS]),
            "positions": positions[start : start + SCAN_ROWS, None],
        }
        for start in range(0, len(protein), SCAN_ROWS)
    ]


def random_proteins(lengths: tuple[int, ...], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(SCORED_AMINO_ACIDS), size=length)) for length in lengths]


def _run(engine: Engine, output: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return engine.run([output], feeds, len(os.sched_getaffinity(0)))


def _scan(description: ModelDescription, engine: Engine) -> Answers:
    """The scanned proteins' masked-marginal scores of every substitution, and each residue's log-probability
    with it masked (whose mean gives the pseudo-perplexity)."""
    scores, wild_types = [], []
    for protein in random_proteins(SCAN_LENGTHS, GATE_SEED):
        residues = np.arange(len(protein))
        # [residues, 20]: each masked residue's log-probabilities
        log_probs = np.concatenate([_run(engine, "log_probs", feeds)[0][:, 0] for feeds in scan_feeds(description, protein)])
        wild = [SCORED_AMINO_ACIDS.index(residue) for residue in protein]
        at_wild = log_probs[residues, wild]
        mutants = np.ones_like(log_probs, dtype=bool)
        mutants[residues, wild] = False
        scores.append((log_probs - at_wild[:, None])[mutants])
        wild_types.append(at_wild)
    return np.concatenate(scores), np.concatenate(wild_types)
