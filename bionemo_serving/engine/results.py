"""What the engine answers: arrays and the facts about them, in no API's shape; each front renders them its way."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bionemo_serving.engine.inputs import ScoringMethod


@dataclass(frozen=True)
class FromModel:
    """The model, at the version, that computed a result."""

    model: str
    model_version: int
    precision: str = field(kw_only=True)
    """What the graph that computed it runs in at that version: FP32, or INT8 (model_catalog.Precision)."""


@dataclass(frozen=True)
class Embeddings(FromModel):
    vectors: np.ndarray
    """[batch, dim] float32, in input order; [batch, layers, dim] with layers."""
    truncated: list[int]
    """Indices of the inputs cut to the model's limit (only where truncation was asked for)."""
    tokens: int
    """Tokens the model read, special tokens included, summed over the inputs (not the batches' padding)."""
    layers: list[int] | None = None
    """The layers of `vectors`, as non-negative indices, where some were asked for."""


@dataclass(frozen=True)
class HiddenStates(FromModel):
    states: np.ndarray
    """[batch, length, dim] float32 of every token, zero-padded to the longest input; [batch, layers, length, dim]
    with layers."""
    mask: np.ndarray
    """[batch, length]: 1 at real tokens, 0 at padding."""
    truncated: list[int]
    layers: list[int] | None = None


@dataclass(frozen=True)
class LogProbs(FromModel):
    log_probs: list[np.ndarray]
    """Per input, [residues, 20]: the log-probability of each amino acid of model_catalog.SCORED_AMINO_ACIDS at every
    residue (special tokens dropped)."""
    truncated: list[int]


@dataclass(frozen=True)
class ContactMaps(FromModel):
    contacts: list[np.ndarray]
    """Per input, [residues, residues]: the probability that two residues are in contact."""
    truncated: list[int]


@dataclass(frozen=True)
class Scores(FromModel):
    method: ScoringMethod
    scores: np.ndarray
    """[variants] in the order asked; for a scan [residues, 20] (those of `scan_positions`), the wild type's own
    column 0."""
    passes: int
    """Model passes the scores took."""
    scan_positions: tuple[int, int] | None = None
    """A scan's first and last residue, 1-based: the matrix's rows."""


@dataclass(frozen=True)
class Decoded(FromModel):
    smiles: list[str]
    """The greedy decoding of each latent, in input order."""


@dataclass(frozen=True)
class GeneratedMolecule:
    smiles: str
    valid: bool
    """RDKit parses it."""
    canonical: str | None
    tanimoto: float | None
    """Morgan-fingerprint Tanimoto similarity to its seed, when valid."""


@dataclass(frozen=True)
class SeedSamples:
    seed_smiles: str
    samples: list[GeneratedMolecule]


@dataclass(frozen=True)
class Generated(FromModel):
    seed: int
    """The random seed used: the same request with it gets the same molecules."""
    results: list[SeedSamples]
    """One per seed molecule, in input order."""


@dataclass(frozen=True)
class ScoredMolecule:
    smiles: str
    """RDKit's canonical SMILES."""
    score: float
    """The property's value."""
    similarity: float
    """Morgan-fingerprint Tanimoto similarity to the seed."""


@dataclass(frozen=True)
class Optimized(FromModel):
    seed: int
    """The random seed used: the same request with it gets the same molecules."""
    seed_smiles: str
    molecules: list[ScoredMolecule]
    """Best first: those at or above the similarity floor, then those below it (the nearer first), each group by
    score; distinct, valid and other than the seed, at most the number asked."""
    decoded: int
    """Latents decoded in the search."""
