"""The property-guided tasks' scoring (benchmarks/molecule_task_scores.py) on hand-made molecules whose QED, penalized
logP and similarity RDKit gives as written beside them; the rates and means over seeds; the task's target."""

from __future__ import annotations

import pytest

from benchmarks import molecule_metrics as metrics
from benchmarks import molecule_task_scores as scores
from benchmarks import record

QED_SEED = "COCCOc1ccccc1C(=O)NCc1cscn1"
"""A test_scaffolds molecule of QED 0.794: a seed of the QED task."""
PARACETAMOL = "CC(=O)Nc1ccc(O)cc1"
"""Penalized logP 1.372."""


def test_a_qed_seed_has_qed_from_0_7_up_to_but_not_0_8() -> None:
    assert scores.is_qed_seed(QED_SEED)
    assert not scores.is_qed_seed("COc1ccccc1C(=O)NCc1cscn1")  # 0.901
    assert not scores.is_qed_seed(PARACETAMOL)  # 0.595
    assert not scores.is_qed_seed("C1CC")


def test_a_qed_hit_needs_qed_of_0_9_and_similarity_of_0_4_together() -> None:
    bromo = "O=C(NCc1cscn1)c1cc(F)cc(Br)c1"  # QED 0.946 at similarity 0.411: a hit
    methoxy = "COc1ccccc1C(=O)NCc1cscn1"  # QED 0.901 at 0.795: a hit
    far = "CN1CCN(c2ccc(NC(=O)c3ccccc3)cc2)CC1"  # QED 0.945 at 0.172: too far
    assert scores.qed_hit(QED_SEED, ["C1CC", far, QED_SEED, bromo, methoxy]) == bromo  # the first that succeeds
    assert scores.qed_hit(QED_SEED, [methoxy]) == methoxy
    assert scores.qed_hit(QED_SEED, [far, QED_SEED, "C1CC", ""]) is None  # the seed itself: similarity 1, QED 0.794
    assert scores.qed_hit(QED_SEED, []) is None


ANALOGUES = [
    "CC(C)Cc1ccc(C(C)C(=O)O)cc1",  # ibuprofen: 1.632, similarity 0.184
    "CC(=O)Nc1ccc(O)c(C)c1",  # 1.317 (worse than the seed), 0.552
    "CCC(=O)Nc1ccc(O)cc1",  # 1.568, 0.593
    "CC(=O)Nc1ccc(OC)cc1",  # 1.809, 0.593
    "CC(=O)Nc1ccc(OCC)cc1",  # phenacetin: 1.968, 0.533
    "C1CC",  # not a molecule
]


@pytest.mark.parametrize(
    ("floor", "best", "improvement"),
    [
        (0.0, "CC(=O)Nc1ccc(OCC)cc1", 1.9683912588130825 - 1.3722663839201896),  # ibuprofen's 1.632 is lower
        (0.4, "CC(=O)Nc1ccc(OCC)cc1", 1.9683912588130825 - 1.3722663839201896),
        (0.55, "CC(=O)Nc1ccc(OC)cc1", 1.8090438510799816 - 1.3722663839201896),  # phenacetin is below this floor
        (0.6, None, 0.0),  # none keeps it: 0, as JT-VAE counts it
    ],
)
def test_the_improvement_is_the_best_penalized_logp_above_the_seeds_that_keeps_the_floor(
    floor: float, best: str | None, improvement: float
) -> None:
    found = scores.plogp_improvement(PARACETAMOL, ANALOGUES, floor)
    assert found.best == best and found.improvement == pytest.approx(improvement)
    assert found.success == (best is not None)


def test_nothing_better_than_the_seed_is_no_improvement_and_no_success() -> None:
    found = scores.plogp_improvement(PARACETAMOL, [PARACETAMOL, "CC(=O)Nc1ccc(O)c(C)c1"], 0.4)
    assert (found.best, found.improvement, found.success) == (None, 0.0, False)
    with pytest.raises(ValueError, match="'C1CC' is not a molecule"):
        scores.plogp_improvement("C1CC", ANALOGUES, 0.4)


def test_rates_and_means_are_over_every_seed_and_none_over_none() -> None:
    assert scores.rate([True, False, False, True]) == 0.5 and scores.rate([]) is None
    assert scores.mean([0.0, 0.6, 0.0]) == pytest.approx(0.2) and scores.mean([]) is None


def test_the_qed_tasks_target_is_vseq2seqs_rate() -> None:
    targets = metrics.checked({"QED task success, CMA-ES": 0.375}, scores.TARGETS)
    assert targets == {"QED task success, CMA-ES": {"value": 0.375, "target": ">= 0.38", "met": False}}
    assert record.missed(metrics.checked({"QED task success, CMA-ES": 0.38}, scores.TARGETS)) == []
    assert scores.QED_TARGET == scores.QED_PUBLISHED["VSeq2Seq"]
