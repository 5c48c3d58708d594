"""What the engine is asked: one frozen dataclass per kind of work, and the choices they name.

Every front builds these from its own messages (the native API's JSON, OpenAI's, BioNeMo's protobuf). The fields are
named as the engine's errors name them (`sequences[2]`, `hiddens[0]`, `mask`); a front whose messages name them
otherwise renames the errors' fields (`ServiceError.renamed`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bionemo_serving.model_catalog import DEFAULT_MOLECULE_MODEL

DEFAULT_MAX_DECODE_LENGTH = 128
"""Most tokens decoded per molecule where a request says nothing."""


# The enums carry no docstring: their names and values are the OpenAPI schema's (fronts/native/protocol.py).
class Pooling(str, enum.Enum):
    MEAN = "mean"
    CLS = "cls"


class ScoringMethod(str, enum.Enum):
    MASKED_MARGINAL = "masked-marginal"
    WILDTYPE_MARGINAL = "wildtype-marginal"
    PSEUDO_LIKELIHOOD = "pseudo-likelihood"


class DecodingMethod(str, enum.Enum):
    GREEDY = "greedy"
    TOPKP = "topkp"
    BEAM = "beam"


class MolecularProperty(str, enum.Enum):
    QED = "QED"
    PLOGP = "plogP"
    QED_SIMILARITY = "QED-similarity"


class SearchAlgorithm(str, enum.Enum):
    CMA_ES = "CMA-ES"
    NONE = "none"


@dataclass(frozen=True)
class SequencesInput:
    """Protein sequences (or SMILES, for a molecule model) for one model: what /logits and /contacts take."""

    sequences: Sequence[str]
    model: str
    model_version: int | None = None
    """None: the newest version served."""
    truncate: bool | None = False
    """Cut an input over the model's length limit to it instead of refusing it. None: the front has no way to ask,
    so a refusal does not suggest it."""


@dataclass(frozen=True)
class HiddenInput(SequencesInput):
    """Every token's hidden states."""

    layers: Sequence[int] | None = None
    """Hidden-state layers instead of the last alone; negative ones count from the end."""


@dataclass(frozen=True)
class EmbedInput(SequencesInput):
    """One vector per input."""

    layers: Sequence[int] | None = None
    pooling: Pooling = Pooling.MEAN
    normalize: bool = False
    """Scale each vector to unit L2 norm."""
    dimensions: int | None = None
    """The vector size the caller expects: a 422 where the model's differs (vectors are never shortened)."""


@dataclass(frozen=True)
class ScoreInput:
    """Variant-effect scores of mutations of one wild type, or its whole single-substitution scan."""

    sequence: str
    model: str
    model_version: int | None
    mutations: Sequence[str] | None
    scan: bool
    method: ScoringMethod
    scan_positions: tuple[int, int] | None = None
    """A scan's first and last residue, 1-based (inclusive); None: every residue."""


@dataclass(frozen=True)
class DecodeInput:
    """Latents to decode greedily back to SMILES: [batch, length, hidden] states and their [batch, length] mask (1 at
    real positions), as nested lists or arrays; their shapes are checked against the model's."""

    hiddens: Sequence[Sequence[Sequence[float]]] | np.ndarray
    mask: Sequence[Sequence[int]] | np.ndarray
    model: str = DEFAULT_MOLECULE_MODEL
    model_version: int | None = None
    max_length: int = DEFAULT_MAX_DECODE_LENGTH


@dataclass(frozen=True)
class GenerateInput:
    """New molecules around seed SMILES: each seed's latent perturbed by Gaussian noise, then decoded."""

    smiles: Sequence[str]
    model: str
    model_version: int | None
    num_samples: int
    scaled_radius: float
    method: DecodingMethod
    temperature: float
    top_k: int
    top_p: float
    beam_size: int
    seed: int | None
    """None: a random seed, which the answer reports."""
    max_length: int


@dataclass(frozen=True)
class OptimizeInput:
    """New molecules around one seed SMILES that improve a property while staying similar to it: latents searched by
    CMA-ES (or sampled once around the seed's, with `SearchAlgorithm.NONE`), each decoded greedily and scored."""

    smiles: str
    model: str
    model_version: int | None
    property: MolecularProperty
    minimize: bool
    """Lower values of `property` are better."""
    min_similarity: float
    """The Tanimoto similarity to the seed below which a molecule ranks behind every one that keeps it."""
    particles: int
    """Latents decoded per iteration: CMA-ES's population (at least 3, pycma's smallest)."""
    iterations: int
    """CMA-ES's generations; one round of sampling with `SearchAlgorithm.NONE`."""
    scaled_radius: float
    """The standard deviation of the first latents around the seed's (CMA-ES's initial step size)."""
    num_molecules: int
    """Most molecules answered: the best distinct valid ones found."""
    algorithm: SearchAlgorithm = SearchAlgorithm.CMA_ES
    seed: int | None = None
    """None: a random seed, which the answer reports."""
    max_length: int = DEFAULT_MAX_DECODE_LENGTH
