"""Property-guided generation (bionemo_serving/engine/optimization.py), in this process over the fake runner.

The fake decoder here writes a molecule of a ladder ordered by QED: the higher the first value of the latent's first
position above the seed's, the higher the rung. CMA-ES has to find that one value among the thousands of the latent
to climb; the similarity floor and invalid SMILES are rungs of the same ladder. Expectations are computed from the
ladder and RDKit, not from the engine's code.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from bionemo_serving.preprocessing.properties import penalized_logp, qed, qed_with_similarity
from bionemo_serving.preprocessing.smiles import canonical_smiles, tanimoto_similarity
from bionemo_serving.model_catalog import DEFAULT_MOLECULE_MODEL
from bionemo_serving.engine.inputs import MolecularProperty, OptimizeInput, SearchAlgorithm
from bionemo_serving.engine.results import Optimized
from bionemo_serving.errors import InvalidRequest, Overloaded
from support.fake_runner import FakeRunner
from support.in_process import engine_over
from support.ladder import LADDER, SEED, LadderRunner

def asked(**changes: Any) -> OptimizeInput:
    """The NIM's defaults but the search's size (20 particles, 10 generations), seeded."""
    defaults = OptimizeInput(
        SEED, DEFAULT_MOLECULE_MODEL, None, MolecularProperty.QED, minimize=False, min_similarity=0.0, particles=20, iterations=10,
        scaled_radius=1.0, num_molecules=5, seed=3,
    )  # fmt: skip
    return replace(defaults, **changes)


def optimize(request: OptimizeInput, runner: FakeRunner | None = None) -> Optimized:
    return asyncio.run(engine_over(runner or LadderRunner()).optimize(request))


def test_cma_es_climbs_to_the_best_molecule_and_answers_the_best_distinct_ones_first() -> None:
    runner = LadderRunner()
    optimized = optimize(asked(), runner)
    smiles = [molecule.smiles for molecule in optimized.molecules]
    assert smiles[0] == canonical_smiles(LADDER[-1])  # the top of the ladder, 7 rungs above the seed
    assert len(smiles) == 5 and len(set(smiles)) == 5 and canonical_smiles(SEED) not in smiles
    assert set(smiles) <= {canonical_smiles(rung) for rung in LADDER}
    for molecule in optimized.molecules:
        assert molecule.score == pytest.approx(qed(molecule.smiles))
        assert molecule.similarity == pytest.approx(tanimoto_similarity(molecule.smiles, SEED))
    scores = [molecule.score for molecule in optimized.molecules]
    assert scores == sorted(scores, reverse=True)
    assert optimized.decoded == runner.decoder_rows() == 20 * 10  # particles x iterations, no more
    assert (optimized.seed, optimized.seed_smiles, optimized.model) == (3, SEED, DEFAULT_MOLECULE_MODEL)


def test_minimize_climbs_down_and_what_is_not_a_molecule_is_never_answered() -> None:
    optimized = optimize(asked(minimize=True))
    scores = [molecule.score for molecule in optimized.molecules]
    assert optimized.molecules[0].smiles == "C"  # the lowest QED; the rung below it does not parse
    assert scores == sorted(scores)
    assert all(canonical_smiles(molecule.smiles) is not None for molecule in optimized.molecules)


def test_molecules_that_keep_the_similarity_floor_rank_before_any_that_do_not() -> None:
    optimized = optimize(asked(min_similarity=0.5, num_molecules=12))
    smiles = [molecule.smiles for molecule in optimized.molecules]
    assert smiles[:4] == [canonical_smiles(rung) for rung in reversed(LADDER[5:9])]  # by QED, all at or above 0.5
    below = optimized.molecules[4:]
    assert below and all(molecule.similarity < 0.5 for molecule in below)
    assert [m.similarity for m in below] == sorted((m.similarity for m in below), reverse=True)  # the nearer first
    assert canonical_smiles(LADDER[9]) in smiles[4:]  # the rung above the best found too, but below the floor


def test_the_same_seed_gives_the_same_molecules_and_another_seed_another_search() -> None:
    first, again = optimize(asked(seed=11, iterations=3)), optimize(asked(seed=11, iterations=3))
    assert first == again
    runners = [LadderRunner(), LadderRunner()]
    optimize(asked(seed=11, iterations=2), runners[0])
    optimize(asked(seed=12, iterations=2), runners[1])
    first_latents = [next(call for call in runner.calls if "parent_ids" in call.inputs) for runner in runners]
    assert not np.array_equal(*(call.inputs["encoder_hidden_states"] for call in first_latents))


def test_each_generations_particles_are_decoded_as_one_batch_stepping_together() -> None:
    """Not one decoding per particle: a generation's 20 latents start in one decoder call, and each later call
    extends rows of the call before it alone, none joining, until the generation's last row has ended."""
    runner = LadderRunner()
    optimize(asked(particles=20, iterations=4), runner)
    steps = [call.inputs for call in runner.calls if "parent_ids" in call.inputs and len(call.inputs["parent_ids"])]
    starts = [index for index, inputs in enumerate(steps) if (inputs["parent_ids"] < 0).any()]
    generations = [steps[start:stop] for start, stop in zip(starts, [*starts[1:], len(steps)])]
    assert len(generations) == 4
    for generation in generations:
        assert (generation[0]["parent_ids"] < 0).sum() == len(generation[0]["parent_ids"]) == 20
        assert len(generation) > 1  # the rows stepped together through several calls
        for before, after in zip(generation, generation[1:]):
            assert set(after["parent_ids"].tolist()) <= set(before["row_ids"].tolist())
            assert len(after["parent_ids"]) == len(set(after["parent_ids"].tolist()))


def test_the_nims_smallest_population_2_runs_pycmas_smallest_3() -> None:
    runner = LadderRunner()
    assert optimize(asked(particles=2, iterations=4), runner).decoded == runner.decoder_rows() == 3 * 4


def test_a_search_without_a_seed_reports_the_one_it_drew() -> None:
    drawn = optimize(asked(seed=None, iterations=2))
    assert optimize(asked(seed=drawn.seed, iterations=2)) == drawn


def test_algorithm_none_decodes_particles_samples_once_whatever_the_iterations() -> None:
    runner = LadderRunner()
    request = asked(algorithm=SearchAlgorithm.NONE, particles=16, iterations=50, scaled_radius=2.0)
    optimized = optimize(request, runner)
    assert optimized.decoded == runner.decoder_rows() == 16
    scores = [molecule.score for molecule in optimized.molecules]
    assert optimized.molecules and scores == sorted(scores, reverse=True)


def test_plogp_is_jt_vae_s_standardised_penalized_logp_as_the_nim_scores_it() -> None:
    """The NIM's own /generate examples (docs.nvidia.com's MolMIM endpoints page): plogP and QED, as it answered them."""
    assert penalized_logp("Cn1c(=O)c2c(ncn2C)n(C)c(=O)c1=O") == pytest.approx(-5.532875846274631)
    assert penalized_logp("Cn1c(=O)c2c(ncn2CC(=O)NCc2ccns2)n(C)c1=O") == pytest.approx(-1.903221843709685)
    assert qed("Cn1c(=O)c2c(ncn2CCC(C)(F)F)n(C)c1=O") == pytest.approx(0.8161010239583072)
    assert penalized_logp("C1CC") is None and qed("") is None
    optimized = optimize(asked(property=MolecularProperty.PLOGP, iterations=3))
    assert all(molecule.score == pytest.approx(penalized_logp(molecule.smiles)) for molecule in optimized.molecules)


def test_qed_similarity_ranks_by_molmims_combined_score_whose_best_rung_is_not_the_best_qed() -> None:
    """On the ladder the combined score peaks at phenacetin (0.771 / 0.9 + 1, its similarity 0.533 capped), below the
    rungs of higher QED that drift further from the seed."""
    optimized = optimize(asked(property=MolecularProperty.QED_SIMILARITY))
    assert optimized.molecules[0].smiles == canonical_smiles(LADDER[8])
    for molecule in optimized.molecules:
        assert molecule.score == pytest.approx(qed_with_similarity(molecule.smiles, SEED))
    assert optimized.molecules[0].score == pytest.approx(qed(LADDER[8]) / 0.9 + 1.0)


def test_fields_the_search_cannot_run_with_are_a_422_naming_each_before_triton_is_asked() -> None:
    runner = LadderRunner()
    bad = asked(particles=0, iterations=0, num_molecules=0, min_similarity=1.5, scaled_radius=0.0)
    with pytest.raises(InvalidRequest) as raised:
        optimize(bad, runner)
    assert [problem.field for problem in raised.value.problems] == [
        "particles", "iterations", "num_molecules", "min_similarity", "scaled_radius"
    ]  # fmt: skip
    with pytest.raises(InvalidRequest, match=r"^smiles: 'C1CC' is not a valid SMILES"):
        optimize(asked(smiles="C1CC"), runner)
    assert runner.calls == []


def test_a_search_that_cannot_finish_in_time_is_refused_before_triton_is_asked() -> None:
    """particles x iterations decodings are its work: the NIM's largest (1,000 x 1,000) could never finish."""
    runner = LadderRunner()
    with pytest.raises(Overloaded, match="send less in one request"):
        optimize(asked(particles=1000, iterations=1000), runner)
    assert runner.calls == []
