"""The property-guided tasks' run (benchmarks/molecule_tasks.py) without the service: its seeds taken from an order,
its figures and timings over hand-made rows, and its markdown section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import molecule_metrics as metrics
from benchmarks import molecule_task_scores as scores
from benchmarks import molecule_tasks as tasks
from benchmarks.molecule_runs import RANDOM_INIT_NOTE
from benchmarks.record import write_section
from bionemo_serving.preprocessing.properties import penalized_logp

QED_SEED = "COCCOc1ccccc1C(=O)NCc1cscn1"  # QED 0.794
ORDER = ["CC(=O)Nc1ccc(O)cc1", QED_SEED, "C", "CCN(CC)C(=O)c1ccccc1", "COc1ccccc1C(=O)NCc1cscn1", "CCCCCCCCCCCCCCCC"]


def test_the_qed_seeds_are_the_first_of_the_order_in_range_and_the_count_read() -> None:
    found = [smiles for smiles in ORDER if scores.is_qed_seed(smiles)]
    assert tasks.qed_seeds(ORDER, 1) == ([QED_SEED], 2)
    assert tasks.qed_seeds(ORDER, 10) == (found, len(ORDER))  # fewer than asked: every molecule read


def test_the_lowest_plogp_molecules_keep_the_orders_order() -> None:
    lowest, highest = tasks.lowest_plogp(ORDER, count=2)
    ranked = sorted(ORDER, key=penalized_logp)
    assert lowest == [smiles for smiles in ORDER if smiles in ranked[:2]]
    assert highest == pytest.approx(penalized_logp(ranked[1]))


def test_timing_is_the_count_median_range_and_total() -> None:
    assert tasks.timing([3.0, 1.0, 2.0, 10.0]) == {
        "requests": 4, "median_s": 2.5, "min_s": 1.0, "max_s": 10.0, "total_s": 16.0
    }  # fmt: skip
    assert tasks.timing([])["requests"] == 0


def qed_row(hit: str | None, unguided_hit: str | None) -> dict[str, Any]:
    return {"cma_es": {"hit": hit, "seconds": 2.0}, "unguided": {"hit": unguided_hit, "seconds": 1.0}}


def plogp_row(at_4: float, at_6: float) -> dict[str, Any]:
    return {
        f"similarity >= {floor}": {"best": "CCO" if gain else None, "improvement": gain, "seconds": 3.0}
        for floor, gain in zip(scores.SIMILARITY_FLOORS, (at_4, at_6))
    }


def test_the_figures_are_over_every_seed_a_seed_without_a_better_molecule_counting_0() -> None:
    figures = tasks.task_figures(
        [qed_row("CCO", None), qed_row(None, None), qed_row("CCN", "CCN"), qed_row(None, None)],
        [plogp_row(1.5, 0.0), plogp_row(0.0, 0.0), plogp_row(3.0, 0.6)],
    )
    assert figures == {
        "QED task success, CMA-ES": 0.5, "QED task success, unguided": 0.25,
        "plogP improvement, similarity >= 0.4": pytest.approx(1.5), "plogP success, similarity >= 0.4": 2 / 3,
        "plogP improvement, similarity >= 0.6": pytest.approx(0.2), "plogP success, similarity >= 0.6": 1 / 3,
    }  # fmt: skip


def record() -> dict[str, Any]:
    """A run's JSON, as few seeds as it takes."""
    figures = tasks.task_figures([qed_row(None, None)], [plogp_row(0.0, 0.0)])
    return {
        "cpu": "a CPU", "cores": 2, "flags": ["avx2"], "date": "today", "commit": "abc1234", "command": "python -m x",
        "served": {"model": {"version": 1, "weights": "random-init default"}},
        "selection": {
            "split": "test_scaffolds", "seed": 47, "qed_seeds": 1, "qed_read": 3, "qed_range": [0.7, 0.8],
            "plogp_seeds": 1, "plogp_lowest": 800, "plogp_lowest_highest": -3.76,
        },
        "budget": {"particles": 20, "iterations": 10, "decodings": 200, "answered": 10, "scaled_radius": 1.0},
        "figures": figures, "targets": metrics.checked(figures, scores.TARGETS),
        "published": {"QED": scores.QED_PUBLISHED, "plogP": scores.PLOGP_PUBLISHED},
        "timing": {tasks.QED_SEARCH: tasks.timing([2.0]), tasks.UNGUIDED: tasks.timing([1.0])},
        "step_seconds": {"selecting seeds": 100.0, "starting the service": 10.0, "whole step": 130.0},
    }  # fmt: skip


def test_the_section_shows_the_figures_beside_the_published_ones_and_replaces_only_its_markers(tmp_path: Path) -> None:
    text = tasks.render(record())
    assert text.startswith(tasks.BEGIN) and text.endswith(tasks.END) and RANDOM_INIT_NOTE in text
    assert "| megamolbart, served: CMA-ES on MolMIM's QED-similarity score | 1 | 0.0 % |" in text
    assert "| VJTNN+GAN (published) | 800 | 56.9 % |" in text and "| GCPN (published) | 800 | 2.49 | | 0.79 | |" in text
    assert "(VSeq2Seq's): **missed**" in text and "ZINC250k" in text
    assert "| QED: CMA-ES | 1 | 2.0 | 2.0–2.0 | 2.0 |" in text and "The whole step took 130 s" in text
    doc = tmp_path / "molecules.md"
    kept = "# Title\n\n<!-- molecules: begin -->\nkept\n<!-- molecules: end -->\n\n"
    doc.write_text(f"{kept}{tasks.BEGIN}\nold\n{tasks.END}\n")
    write_section(doc, text)
    assert doc.read_text() == f"{kept}{text}\n"
