"""The MOSES splits, read from the files the `molsets` package installs, as SMILES the served tokenizer accepts.

`moses` itself is never imported: its package imports matplotlib, pandas and more that this project does not install
(molsets goes in with --no-deps); the split files are plain gzipped CSVs inside it. Training reads the train split only
(`training_molecules` has no way to name another), so that the held-out splits stay held out for the benchmarks
(`held_out_molecules`).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bionemo_serving.preprocessing.smiles import FIRST_CHEMISTRY_ID, SmilesTokenizer

TRAIN_SPLIT = "train"
HELD_OUT_SPLITS = ("test", "test_scaffolds")
HEADER = "SMILES"
HOLDOUT_SEED = 47
"""Fixes which train molecules `TrainingData.holdout` sets aside, whatever the recipe's seed: every run of any
recipe is checked on the same molecules."""


def split_file(split: str) -> Path:
    """Where molsets keeps `split` (`moses/dataset/data/<split>.csv.gz`), found without importing moses."""
    if split not in (TRAIN_SPLIT, *HELD_OUT_SPLITS):
        raise ValueError(f"unknown MOSES split {split!r}; known: {TRAIN_SPLIT}, {', '.join(HELD_OUT_SPLITS)}")
    spec = importlib.util.find_spec("moses")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the molsets package (module moses) is not installed: pip install --no-deps molsets")
    path = Path(spec.submodule_search_locations[0]) / "dataset" / "data" / f"{split}.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing from the molsets package")
    return path


def split_sha256(split: str) -> str:
    """The split file's digest, recorded with a trained model: which MOSES files it saw."""
    return hashlib.sha256(split_file(split).read_bytes()).hexdigest()


def _read_split(split: str, limit: int | None) -> list[str]:
    """The SMILES of `split` in file order; with `limit`, the first `limit` only (the rest is never decompressed)."""
    with gzip.open(split_file(split), "rt") as lines:
        header = next(lines).strip()
        if header != HEADER:
            raise ValueError(f"{split_file(split)}: header {header!r}, expected {HEADER!r}")
        return [line.strip() for line in itertools.islice(lines, limit) if line.strip()]


@dataclass(frozen=True)
class Molecules:
    """SMILES the tokenizer takes whole, their token counts, and how many of the split's were left out and why."""

    smiles: list[str]
    token_counts: np.ndarray
    read: int
    unknown_tokens: int
    """Left out: a token outside MegaMolBART's chemistry vocabulary (MOSES train: 221 with an explicit `[H]`)."""
    too_long: int
    """Left out: more than the recipe's `max_tokens` SMILES tokens."""


def tokenizable(smiles: list[str], tokenizer: SmilesTokenizer, max_tokens: int) -> Molecules:
    """The molecules of `smiles` the encoder can read as they are, counted by why the others cannot.

    RDKit is not asked: every MOSES SMILES parses, and parsing 1.6 M of them would cost minutes at every start."""
    kept, counts, unknown, too_long = [], [], 0, 0
    for molecule in smiles:
        tokens = tokenizer.split(molecule)
        if any(tokenizer.ids.get(token, -1) < FIRST_CHEMISTRY_ID for token in tokens):
            unknown += 1
        elif len(tokens) > max_tokens:
            too_long += 1
        else:
            kept.append(molecule)
            counts.append(len(tokens))
    return Molecules(kept, np.array(counts, dtype=np.int64), len(smiles), unknown, too_long)


@dataclass(frozen=True)
class TrainingData:
    """MOSES train, less a fixed slice set aside to watch reconstruction without touching any test split."""

    molecules: Molecules
    training: np.ndarray
    """Indices into `molecules.smiles` that batches are drawn from."""
    holdout: np.ndarray
    """Indices into `molecules.smiles` never trained on; `--eval` reconstructs these."""

    @property
    def holdout_smiles(self) -> list[str]:
        return [self.molecules.smiles[index] for index in self.holdout]

    def summary(self) -> dict[str, Any]:
        """What training.json says of the data; a resumed run must find the same."""
        return {
            "dataset": "MOSES",
            "split": TRAIN_SPLIT,
            "file": split_file(TRAIN_SPLIT).name,
            "sha256": split_sha256(TRAIN_SPLIT),
            "read": self.molecules.read,
            "unknown_tokens": self.molecules.unknown_tokens,
            "too_long": self.molecules.too_long,
            "holdout": len(self.holdout),
            "training": len(self.training),
        }


def training_molecules(tokenizer: SmilesTokenizer, max_tokens: int, holdout: int, limit: int | None) -> TrainingData:
    """MOSES train (its first `limit` molecules with `limit`) the tokenizer takes, `holdout` of them set aside."""
    molecules = tokenizable(_read_split(TRAIN_SPLIT, limit), tokenizer, max_tokens)
    if holdout >= len(molecules.smiles):
        raise ValueError(f"holdout of {holdout} leaves nothing to train on among {len(molecules.smiles)} molecules")
    order = np.random.default_rng(HOLDOUT_SEED).permutation(len(molecules.smiles))
    return TrainingData(molecules, np.sort(order[holdout:]), np.sort(order[:holdout]))


def held_out_molecules(split: str, tokenizer: SmilesTokenizer, max_tokens: int, limit: int | None = None) -> Molecules:
    """A test split, for benchmarks of a trained model; training never calls this."""
    if split not in HELD_OUT_SPLITS:
        raise ValueError(f"{split!r} is not a held-out MOSES split ({', '.join(HELD_OUT_SPLITS)})")
    return tokenizable(_read_split(split, limit), tokenizer, max_tokens)
