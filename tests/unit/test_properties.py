"""MolMIM's combined score of the QED task (bionemo_serving/preprocessing/properties.py) on known molecules: each half is QED or the
Tanimoto similarity as a share of its goal (0.9, 0.4), capped at 1; the QED and similarity values below are RDKit's
(QED.qed; Morgan radius 2, 2048 bits), read once and written here."""

from __future__ import annotations

import pytest

from bionemo_serving.preprocessing.properties import qed_with_similarity

PARACETAMOL = "CC(=O)Nc1ccc(O)cc1"
"""QED 0.5950."""
BENZAMIDE = "CN1CCN(c2ccc(NC(=O)c3ccccc3)cc2)CC1"
"""QED 0.9454: above the goal; similarity to paracetamol 2/7."""


@pytest.mark.parametrize(
    ("smiles", "seed", "expected"),
    [
        (BENZAMIDE, PARACETAMOL, 1.0 + (2 / 7) / 0.4),  # QED capped, similarity 0.286 short of the goal
        ("CC(=O)Nc1ccc(OCC)cc1", PARACETAMOL, 0.7706788668096719 / 0.9 + 1.0),  # phenacetin: similarity 0.533 capped
        ("CC(C)Cc1ccc(C(C)C(=O)O)cc1", PARACETAMOL, 0.8215995486924976 / 0.9 + 0.18421052631578946 / 0.4),  # ibuprofen
        (PARACETAMOL, PARACETAMOL, 0.5950261967780849 / 0.9 + 1.0),  # the seed itself: similarity 1, capped
        (BENZAMIDE, BENZAMIDE, 2.0),  # a success of the task scores the maximum
        ("C", PARACETAMOL, 0.3597849378839701 / 0.9),  # methane shares no bit with the seed
    ],
    ids=["qed-capped", "similarity-capped", "neither-capped", "seed-itself", "maximum", "no-shared-bit"],
)
def test_the_combined_score_is_each_share_of_its_goal_capped_at_1(smiles: str, seed: str, expected: float) -> None:
    assert qed_with_similarity(smiles, seed) == pytest.approx(expected)


@pytest.mark.parametrize("smiles", ["C1CC", "", "not a molecule"])
def test_what_is_not_a_molecule_scores_0_as_molmims_oracle_scores_it(smiles: str) -> None:
    assert qed_with_similarity(smiles, PARACETAMOL) == 0.0


def test_a_seed_that_is_not_a_molecule_is_an_error() -> None:
    with pytest.raises(ValueError, match="'C1CC' is not a molecule"):
        qed_with_similarity(PARACETAMOL, "C1CC")
