"""The native /generate's `optimize` option in this process, through the service's descriptors, routes and engine
over the fake runner whose decoder climbs tests/support/ladder.py's QED ladder: the engine's one search
(bionemo_serving/engine/optimization.py) answered in /generate's shape, each molecule with its score; every bad value a 422
naming its field; /generate without the option as it was."""

from __future__ import annotations

from typing import Any

import pytest

from bionemo_serving.preprocessing.properties import qed, qed_with_similarity
from bionemo_serving.preprocessing.smiles import canonical_smiles, tanimoto_similarity
from support.in_process import InProcessService, assert_rejected
from support.ladder import LADDER, SEED, LadderRunner

SEARCH = {"property": "QED", "min_similarity": 0.5, "particles": 20, "iterations": 8}


def generate(body: dict[str, Any], runner: LadderRunner | None = None) -> dict[str, Any]:
    answer = InProcessService(runner or LadderRunner()).post("/generate", body)
    assert answer.status == 200, answer.body
    return answer.json()


def test_optimize_answers_the_searchs_molecules_as_one_seeds_samples_each_with_its_score() -> None:
    runner = LadderRunner()
    answer = generate({"smiles": [SEED], "num_samples": 3, "seed": 5, "optimize": SEARCH}, runner)
    assert answer["seed"] == 5 and answer["model"] == "megamolbart"
    (result,) = answer["results"]
    assert set(result) == {"seed_smiles", "samples", "decoded"} and result["seed_smiles"] == SEED
    assert result["decoded"] == runner.decoder_rows() == 20 * 8
    samples = result["samples"]
    assert len(samples) == 3 and samples[0]["smiles"] == canonical_smiles(LADDER[8])  # the best at similarity >= 0.5
    for sample in samples:
        assert set(sample) == {"smiles", "valid", "canonical", "tanimoto", "score"}
        assert sample["valid"] and sample["canonical"] == sample["smiles"] == canonical_smiles(sample["smiles"])
        assert sample["score"] == pytest.approx(qed(sample["smiles"]))
        assert sample["tanimoto"] == pytest.approx(tanimoto_similarity(sample["smiles"], SEED))


def test_the_native_option_and_the_nims_generate_run_the_same_search() -> None:
    """One engine method, two fronts: the same search and seed give the same molecules and scores."""
    native = generate({"smiles": [SEED], "num_samples": 4, "seed": 9, "optimize": SEARCH})["results"][0]["samples"]
    nim_body = {"smi": SEED, "num_molecules": 4, "seed": 9, "property_name": "QED", "min_similarity": 0.5,
                "particles": 20, "iterations": 8}  # fmt: skip
    nim = InProcessService(LadderRunner()).post("/molmim/generate", nim_body).json()["generated"]
    assert [(s["smiles"], s["score"], s["tanimoto"]) for s in native] == [
        (m["smiles"], m["score"], m["similarity"]) for m in nim
    ]


def test_qed_similarity_scores_by_molmims_combined_score() -> None:
    search = {"property": "QED-similarity", "min_similarity": 0.0, "particles": 20, "iterations": 10}
    samples = generate({"smiles": [SEED], "num_samples": 5, "seed": 3, "optimize": search})["results"][0]["samples"]
    assert samples[0]["smiles"] == canonical_smiles(LADDER[8])  # phenacetin: 0.771 / 0.9 + 1, the ladder's highest
    assert all(s["score"] == pytest.approx(qed_with_similarity(s["smiles"], SEED)) for s in samples)


def test_algorithm_none_samples_particles_latents_once() -> None:
    runner = LadderRunner()
    search = {"algorithm": "none", "particles": 16, "iterations": 50, "min_similarity": 0.0}
    answer = generate({"smiles": [SEED], "scaled_radius": 2.0, "seed": 1, "optimize": search}, runner)
    assert answer["results"][0]["decoded"] == runner.decoder_rows() == 16


def test_generate_without_the_option_answers_as_it_did() -> None:
    answer = generate({"smiles": [SEED, "CCO"], "num_samples": 2, "seed": 1})
    assert set(answer) == {"model", "model_version", "precision", "seed", "results"}
    for result in answer["results"]:
        assert set(result) == {"seed_smiles", "samples"}
        assert all(set(sample) == {"smiles", "valid", "canonical", "tanimoto"} for sample in result["samples"])


ONE = {"smiles": [SEED]}
BAD = [
    ({"optimize": {**SEARCH, "particles": 1}}, "optimize.particles", "greater than or equal to 2"),
    ({"optimize": {"particles": 1001}}, "optimize.particles", "less than or equal to 1000"),
    ({"optimize": {"iterations": 0}}, "optimize.iterations", "greater than or equal to 1"),
    ({"optimize": {"iterations": 1001}}, "optimize.iterations", "less than or equal to 1000"),
    ({"optimize": {"min_similarity": 1.5}}, "optimize.min_similarity", "less than or equal to 1"),
    ({"optimize": {"min_similarity": -0.1}}, "optimize.min_similarity", "greater than or equal to 0"),
    ({"optimize": {"property": "logP"}}, "optimize.property", "'QED', 'plogP' or 'QED-similarity'"),
    ({"optimize": {"algorithm": "GA"}}, "optimize.algorithm", "'CMA-ES' or 'none'"),
    ({"optimize": {"minimize": "yes"}}, "optimize.minimize", "valid boolean"),
    ({"optimize": {"particles": "20"}}, "optimize.particles", "valid integer"),
    ({"optimize": {"particle": 20}}, "optimize.particle", "Extra inputs are not permitted"),
    ({"optimize": "CMA-ES"}, "optimize", "should be an object"),
    ({"optimize": {}, "smiles": [SEED, "CCO"]}, "smiles", "with `optimize`, send one"),
    ({"optimize": {}, "method": "beam"}, "method", "decoded greedily"),
    ({"optimize": {}, "scaled_radius": 0}, "scaled_radius", "CMA-ES's initial step size"),
    ({"optimize": {}, "smiles": ["C1CC"]}, "smiles[0]", "not a valid SMILES"),
    ({"optimize": {}, "num_samples": 65}, "num_samples", "less than or equal to 64"),
    ({"optimize": {}, "model": "esm2nv"}, "model", "models that can: megamolbart"),
]


@pytest.mark.parametrize(("body", "field", "message"), BAD, ids=[f"{field}-{i}" for i, (_, field, _) in enumerate(BAD)])
def test_every_bad_value_is_a_422_naming_its_field_before_triton_is_asked(
    body: dict[str, Any], field: str, message: str
) -> None:
    routes = InProcessService(LadderRunner())
    assert_rejected(routes.post("/generate", {**ONE, **body}), 422, field, message)
    assert not [call for call in routes.runner.calls if "parent_ids" in call.inputs]


def test_a_search_that_cannot_finish_in_time_is_a_503_before_triton_is_asked() -> None:
    routes = InProcessService(LadderRunner())
    answer = routes.post("/generate", {**ONE, "optimize": {"particles": 1000, "iterations": 1000}})
    assert answer.status == 503 and "send less in one request" in answer.body.decode()
    assert routes.runner.calls == []
