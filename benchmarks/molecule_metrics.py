"""The molecule benchmark's figures, as pure functions of SMILES: MOSES's metrics computed as MOSES computes them
(molsets 0.3.1, moses/metrics/metrics.py), the figures of sampling around seeds, and the targets checked on them.

A molecule is valid when RDKit parses and sanitises it (MOSES's `get_mol`); every figure compares RDKit-canonical
SMILES (`canonical_smiles`, MOSES's `canonic_smiles`), so that two spellings of one molecule count as one.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks import record
from bionemo_serving.training.moses_data import TRAIN_SPLIT, split_file

Canonical = str | None
"""A molecule's RDKit-canonical SMILES, None where it is not valid."""

TARGETS = {
    "exact reconstruction": 0.90,
    "valid samples": 0.90,
    "samples different from their seed": 0.50,
    "unique valid samples": 0.90,
}
"""Issue 47's targets for the served model on held-out scaffolds: each figure must reach at least this."""

PRIOR, TRAIN_SET = "30,000 from its prior", "MOSES train itself"
MOSES_BASELINES: dict[str, dict[str, float | str]] = {
    "CharRNN": {"sampled": PRIOR, "valid": 0.9748, "unique@10k": 0.9994, "FCD/Test": 0.0732, "FCD/TestSF": 0.5204,
                "novelty": 0.8419},
    "VAE": {"sampled": PRIOR, "valid": 0.9767, "unique@10k": 0.9984, "FCD/Test": 0.099, "FCD/TestSF": 0.567,
            "novelty": 0.6949},
    "JTN-VAE": {"sampled": PRIOR, "valid": 1.0, "unique@10k": 0.9996, "FCD/Test": 0.3954, "FCD/TestSF": 0.9382,
                "novelty": 0.9143},
    "train": {"sampled": TRAIN_SET, "valid": 1.0, "unique@10k": 1.0, "FCD/Test": 0.008, "FCD/TestSF": 0.4755,
              "novelty": 1.0},
}  # fmt: skip
"""MOSES's published figures (Polykovskiy et al. 2020, Frontiers in Pharmacology, the metrics table; the same table,
means of 3 runs, in github.com/molecularsets/moses README.md): 30,000 molecules sampled from each model's prior, and
the train set's own figures, MOSES's reference row."""


def fraction_valid(canonicals: Sequence[Canonical]) -> float | None:
    """MOSES's `valid`: the share of all molecules that are valid."""
    return sum(c is not None for c in canonicals) / len(canonicals) if canonicals else None


def fraction_unique(canonicals: Sequence[Canonical]) -> float | None:
    """MOSES's `unique@k` with k every valid molecule: distinct canonical SMILES over valid molecules, duplicates
    within a seed's samples and across seeds alike."""
    valid = [c for c in canonicals if c is not None]
    return len(set(valid)) / len(valid) if valid else None


def mean_unique_per_seed(groups: Sequence[Sequence[Canonical]]) -> float | None:
    """Each seed's distinct valid samples over its valid samples, averaged over the seeds with one valid sample or
    more: whether the noise around one seed collapses onto few molecules, every seed weighing alike."""
    shares = [fraction_unique(group) for group in groups]
    known = [share for share in shares if share is not None]
    return float(np.mean(known)) if known else None


def fraction_different(seeds: Sequence[Canonical], groups: Sequence[Sequence[Canonical]]) -> float | None:
    """The share of all samples that are valid and another molecule than their seed: an invalid sample counts as
    not different (it is no molecule near the seed, only noise)."""
    samples = [(seed, sample) for seed, group in zip(seeds, groups, strict=True) for sample in group]
    return sum(c is not None and c != seed for seed, c in samples) / len(samples) if samples else None


def novelty(canonicals: Sequence[Canonical], train: set[str]) -> float | None:
    """MOSES's `Novelty`: the distinct valid molecules absent from `train` over the distinct valid molecules."""
    distinct = {c for c in canonicals if c is not None}
    return len(distinct - train) / len(distinct) if distinct else None


def fraction_exact(seeds: Sequence[Canonical], decoded: Sequence[Canonical]) -> float | None:
    """The share of molecules decoded back to themselves, canonical for canonical."""
    pairs = list(zip(seeds, decoded, strict=True))
    return sum(seed is not None and seed == molecule for seed, molecule in pairs) / len(pairs) if pairs else None


def moses_train() -> set[str]:
    """MOSES train's SMILES as the file holds them: MOSES's `novelty` compares canonical molecules with them as they
    are (they were written canonical; today's RDKit writes about 1 in 10,000 of them otherwise)."""
    with gzip.open(split_file(TRAIN_SPLIT), "rt") as lines:
        next(lines)  # the header
        return {line.strip() for line in lines if line.strip()}


def moses_fcd_statistics(split: str) -> dict[str, np.ndarray]:
    """ChemNet's mean and covariance over the whole `split` as MOSES precomputed them (`<split>_stats.npz`, key
    `stats`, entry `FCD`): what MOSES's FCD/Test and FCD/TestSF compare with."""
    path = split_file(split).with_name(f"{split}_stats.npz")
    with np.load(path, allow_pickle=True) as stored:  # a pickled dict: the molsets wheel's own file
        return stored["stats"].item()["FCD"]


@functools.cache
def _chemnet() -> Any:
    """fcd_torch's FCD with its ChemNet weights, as MOSES builds it (CPU, batches of 512, SMILES canonicalised).
    Imported here: fcd-torch is the benchmark's alone, and the metrics above need none of it."""
    from fcd_torch import FCD

    return FCD(device="cpu", n_jobs=1, batch_size=512)


def fcd_statistics(smiles: Sequence[str]) -> dict[str, np.ndarray]:
    """ChemNet's mean and covariance over `smiles` (at least 2): computed once per set, then compared with each
    reference."""
    if len(smiles) < 2:
        raise ValueError(f"FCD needs at least 2 molecules, not {len(smiles)}")
    return _chemnet().precalc(list(smiles))


def fcd(reference: dict[str, np.ndarray], generated: dict[str, np.ndarray]) -> float:
    """MOSES's FCD of the generated set against a reference's statistics (`FCDMetric.metric(pref, pgen)`). It is
    biased upward on few molecules: compare only figures of equal counts (see the floor in benchmarks/molecules.py)."""
    return float(_chemnet().metric(reference, generated))


def checked(figures: dict[str, float | None], targets: dict[str, float] = TARGETS) -> dict[str, dict[str, Any]]:
    """Each target's figure (of `targets`, each an at-least bound: the sampling's, or the tasks' of
    benchmarks/molecule_task_scores.py) and whether it was met; a figure that could not be computed (None) misses."""
    return record.checked({name: record.Target(">=", wanted) for name, wanted in targets.items()}, figures)
