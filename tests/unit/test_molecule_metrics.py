"""The molecule benchmark's figures on hand-made sets whose answers are known, its targets, and its markdown section.
FCD's ChemNet comes with fcd-torch (the test and bench extras)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks import molecule_metrics as metrics
from benchmarks.molecule_runs import RANDOM_INIT_NOTE
from benchmarks.record import write_section
from benchmarks.molecules import BEGIN, END, render
from benchmarks.record import missed
from benchmarks.workload import DRUG_SMILES
from bionemo_serving.preprocessing.smiles import canonical_smiles

ETHANOL, BENZENE = canonical_smiles("CCO"), canonical_smiles("c1ccccc1")


def canonicals(smiles: list[str]) -> list[str | None]:
    return [canonical_smiles(molecule) for molecule in smiles]


def test_validity_is_the_share_rdkit_parses() -> None:
    assert metrics.fraction_valid(canonicals(["CCO", "OCC", "C1CC", "c1cccc1"])) == 0.5  # an open ring, a 5-ring kekulé
    assert metrics.fraction_valid([]) is None


def test_uniqueness_counts_spellings_of_one_molecule_once_within_and_across_seeds() -> None:
    per_seed = [canonicals(["CCO", "OCC"]), canonicals(["c1ccccc1", "C1CC"]), canonicals(["C1CC"]), canonicals(["CCO"])]
    every = [molecule for group in per_seed for molecule in group]
    assert metrics.fraction_unique(every) == 2 / 4  # valid: ethanol x3, benzene
    # seed 1: 1 of 2, seed 2: 1 of 1, seed 3: no valid sample (left out), seed 4: 1 of 1
    assert metrics.mean_unique_per_seed(per_seed) == pytest.approx((0.5 + 1 + 1) / 3)
    assert metrics.fraction_unique(canonicals(["C1CC"])) is None


def test_a_sample_differs_from_its_seed_only_when_valid_and_another_molecule() -> None:
    seeds = [ETHANOL, BENZENE]
    groups = [canonicals(["OCC", "CCN", "C1CC"]), canonicals(["CCO"])]
    assert metrics.fraction_different(seeds, groups) == 2 / 4  # CCN, and ethanol around benzene


def test_novelty_is_over_distinct_valid_molecules_absent_from_train() -> None:
    generated = canonicals(["CCO", "OCC", "CCC", "C1CC", "CCCC"])
    assert metrics.novelty(generated, {ETHANOL, "CCN"}) == 2 / 3  # {ethanol, propane, butane}: ethanol is known


def test_exact_reconstruction_compares_canonical_forms() -> None:
    seeds = canonicals(["CCO", "c1ccccc1", "CCN"])
    assert metrics.fraction_exact(seeds, canonicals(["OCC", "C1=CC=CC=C1", "C1CC"])) == 2 / 3


def test_moses_train_is_read_whole_and_its_molecules_are_not_novel() -> None:
    train = metrics.moses_train()
    assert len(train) > 1_500_000
    assert metrics.novelty(canonicals(["CCCS(=O)c1ccc2[nH]c(=NC(=O)OC)[nH]c2c1"]), train) == 0.0  # its first


def test_fcd_of_a_set_against_its_own_statistics_is_zero() -> None:
    """One FCD of ChemNet's 512 dimensions: its matrix square root takes seconds on 2 cores."""
    statistics = metrics.fcd_statistics(list(DRUG_SMILES))
    assert statistics["mu"].shape == (512,)
    assert metrics.fcd(statistics, statistics) == pytest.approx(0.0, abs=1e-4)


def test_fcd_is_the_frechet_distance_of_two_gaussians() -> None:
    """||mu1 - mu2||^2 + Tr(S1 + S2 - 2 sqrt(S1 S2)): 3^2 + 4^2 for unit covariances, + (2 - 1)^2 for variances 4, 1."""
    unit = {"mu": np.zeros(2), "sigma": np.eye(2)}
    assert metrics.fcd(unit, {"mu": np.array([3.0, 4.0]), "sigma": np.eye(2)}) == pytest.approx(25.0)
    assert metrics.fcd(unit, {"mu": np.zeros(2), "sigma": np.diag([4.0, 1.0])}) == pytest.approx(1.0)


def test_moses_statistics_are_chemnets_mean_and_covariance() -> None:
    statistics = metrics.moses_fcd_statistics("test_scaffolds")
    assert statistics["mu"].shape == (512,) and statistics["sigma"].shape == (512, 512)


def test_the_target_check_reports_a_miss_and_a_figure_it_could_not_compute() -> None:
    met = {name: wanted for name, wanted in metrics.TARGETS.items()}
    assert missed(metrics.checked(met)) == []
    targets = metrics.checked({**met, "valid samples": 0.89, "unique valid samples": None})
    assert missed(targets) == ["valid samples", "unique valid samples"]
    assert targets["valid samples"] == {"value": 0.89, "target": ">= 0.9", "met": False}


def record(targets: dict) -> dict:
    """A run's JSON, as few molecules as it takes."""
    timed = {"molecules": 2, "seconds": 1.0, "molecules_per_s": 2.0}
    return {
        "cpu": "a CPU", "cores": 2, "flags": ["avx2"], "date": "today", "commit": "abc1234", "command": "python -m x",
        "served": {"model": {"version": 1, "weights": "random-init default"}},
        "selection": {
            "split": "test_scaffolds", "reconstructed": 2, "seeds": 1, "seed": 47, "read": 10, "unknown_tokens": 0,
        },
        "sampling": {"samples_per_seed": 2, "method": "greedy", "scaled_radius": 1.0, "batch": 32},
        "figures": {"mean unique per seed": None, "mean tanimoto to seed": None},
        "moses": {"molecules": 2, "valid molecules": 0, "valid": 0.0, "unique@0": None, "novelty": None},
        "moses_baselines": metrics.MOSES_BASELINES, "timing": {"/hidden": timed}, "targets": targets,
    }  # fmt: skip


def test_the_section_names_the_weights_and_the_miss_and_replaces_only_what_the_markers_hold(tmp_path: Path) -> None:
    targets = metrics.checked({"exact reconstruction": 0.0})
    text = render(record(targets))
    assert text.startswith(BEGIN) and text.endswith(END)
    assert "random-init default" in text and RANDOM_INIT_NOTE in text
    assert "| exact reconstruction | 0.000 | >= 0.9 | **missed** |" in text
    assert "30,000 molecules from each model's prior" in text  # the baselines' caveat
    doc = tmp_path / "molecules.md"
    doc.write_text(f"# Title\n\n{BEGIN}\nold\n{END}\n\nAfter.\n")
    write_section(doc, text)
    assert doc.read_text() == f"# Title\n\n{text}\n\nAfter.\n"
