"""MolMIM's NIM API end to end, called as a NIM client calls it: plain `requests` on the base URL + /molmim, the
NIM's own example bodies (docs.nvidia.com's MolMIM endpoints page), its answers read by their NIM field names.

The default export's megamolbart is random-init: its decoder writes no molecule from a latent near a real one's (it
repeats `^`), so /molmim/generate answers no molecule there, and the checks that need molecules (num_molecules of
them, none worse than the seed) run where GET /models says the weights are a checkpoint's. What holds whatever the
weights is checked always: the shapes, each answered molecule's score and similarity as RDKit computes them, the order,
the work done (particles x iterations decodings, in Triton's statistics), reproducibility, the 422s and the 503.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import requests

from bionemo_serving.model_catalog import MODELS, RANDOM_INIT_WEIGHTS
from bionemo_serving.preprocessing.properties import penalized_logp, qed
from bionemo_serving.preprocessing.smiles import canonical_smiles, tanimoto_similarity
from support.service import RunningService

pytestmark = pytest.mark.e2e

CAFFEINE = "CN1C=NC2=C1C(=O)N(C(=O)N2C)C"
IBUPROFEN = "CC(Cc1ccc(cc1)C(C(=O)O)C)C"
CMA_ES = {"smi": CAFFEINE, "algorithm": "CMA-ES", "num_molecules": 5, "property_name": "QED", "minimize": False,
          "min_similarity": 0.4, "particles": 8, "iterations": 3}  # fmt: skip
"""The NIM's own CMA-ES example."""
MAX_LENGTH = 128
"""Tokens the NIM dialect decodes at most per molecule (the engine's default)."""


def post(service: RunningService, path: str, body: Any) -> requests.Response:
    """As a NIM client posts: JSON, nothing but the base URL changed."""
    return requests.post(f"{service.url}/molmim{path}", json=body, headers={"accept": "application/json"}, timeout=600)


def answer(service: RunningService, path: str, body: Any) -> Any:
    response = post(service, path, body)
    assert response.status_code == 200, response.text
    return response.json()


def test_models_names_the_molecule_default_trained_here_with_its_card_and_the_proteins_random_init(
    service: RunningService,
) -> None:
    weights = {model["name"]: model["weights"] for model in service.served_models()}
    assert weights["megamolbart"] == "trained here on MOSES train (weights/megamolbart-moses/MODEL_CARD.md)"
    assert weights["megamolbart"] == MODELS["megamolbart"].default_weights
    assert {name: weights[name] for name in ("esm1nv", "esm2nv", "prott5nv")} == dict.fromkeys(
        ("esm1nv", "esm2nv", "prott5nv"), RANDOM_INIT_WEIGHTS
    )


def test_embedding_and_hidden_answer_the_native_apis_values(service: RunningService) -> None:
    embedded = answer(service, "/embedding", {"sequences": [CAFFEINE, IBUPROFEN]})
    native = service.answer("/embed", {"model": "megamolbart", "sequences": [CAFFEINE, IBUPROFEN]})
    assert list(embedded) == ["embeddings"] and embedded["embeddings"] == native["embeddings"]
    hidden = answer(service, "/hidden", {"sequences": [CAFFEINE, "CCO"]})
    native = service.answer("/hidden", {"model": "megamolbart", "sequences": [CAFFEINE, "CCO"]})
    assert list(hidden) == ["hiddens", "mask"] and hidden["hiddens"] == native["hiddens"]
    assert hidden["mask"] == [[bool(real) for real in row] for row in native["mask"]]  # the NIM's booleans


def test_decode_takes_hidden_as_a_nim_client_sends_it_back_and_decodes_as_the_native_api(service: RunningService) -> None:
    hidden = answer(service, "/hidden", {"sequences": [CAFFEINE, "CCO"]})
    decoded = answer(service, "/decode", hidden)
    assert list(decoded) == ["generated"] and len(decoded["generated"]) == 2
    # Latents far from the untrained model's comfort zone, so that the decodings differ (tests/e2e/test_molecules_e2e.py).
    rng = np.random.default_rng(0)
    hiddens = (rng.standard_normal((3, 7, len(hidden["hiddens"][0][0]))) * 100).astype(np.float32)
    mask = np.ones((3, 7), dtype=bool)
    mask[1, 4:] = False
    hiddens[~mask] = 0
    nim = answer(service, "/decode", {"hiddens": hiddens.tolist(), "mask": mask.tolist()})["generated"]
    native = service.answer("/decode", {"hiddens": hiddens.tolist(), "mask": mask.astype(int).tolist()})["smiles"]
    assert nim == native and len(set(nim)) == 3


def test_sampling_answers_num_molecules_per_seed_as_the_native_generate(service: RunningService) -> None:
    body = {"sequences": [CAFFEINE, IBUPROFEN], "num_molecules": 3, "beam_size": 2, "scaled_radius": 0.7, "seed": 4}
    sampled = answer(service, "/sampling", body)
    assert list(sampled) == ["generated"] and [len(samples) for samples in sampled["generated"]] == [3, 3]
    native = service.answer(
        "/generate", {"smiles": body["sequences"], "num_samples": 3, "method": "beam", "beam_size": 2,
                      "scaled_radius": 0.7, "seed": 4, "max_length": MAX_LENGTH},
    )  # fmt: skip
    assert sampled["generated"] == [[sample["smiles"] for sample in seed["samples"]] for seed in native["results"]]
    defaults = answer(service, "/sampling", {"sequences": [CAFFEINE]})["generated"]
    assert [len(samples) for samples in defaults] == [1]  # the NIM's default: 1 molecule per seed


def assert_scored_and_ordered(generated: list[dict[str, Any]], body: dict[str, Any]) -> None:
    """Every answered molecule is valid, distinct, not the seed; its score is the property and its similarity the
    Tanimoto RDKit computes; those at or above the floor come first by score, then the others, the nearer first."""
    score_of = {"QED": qed, "plogP": penalized_logp}[body.get("property_name", "QED")]
    smiles = [molecule["smiles"] for molecule in generated]
    assert len(smiles) <= body["num_molecules"] and len(set(smiles)) == len(smiles)
    assert canonical_smiles(body["smi"]) not in smiles
    for molecule in generated:
        assert set(molecule) == {"smiles", "score", "similarity"}
        assert canonical_smiles(molecule["smiles"]) == molecule["smiles"]
        assert molecule["score"] == pytest.approx(score_of(molecule["smiles"]))
        assert molecule["similarity"] == pytest.approx(tanimoto_similarity(molecule["smiles"], body["smi"]))
    better = -1 if body.get("minimize") else 1
    floor = body.get("min_similarity", 0.7)
    keys = [(m["similarity"] < floor, max(floor - m["similarity"], 0), -better * m["score"]) for m in generated]
    assert keys == sorted(keys)


def test_generate_with_cma_es_decodes_particles_x_iterations_latents_and_answers_scored_molecules(
    service: RunningService,
) -> None:
    body = {**CMA_ES, "seed": 1}
    inferences, _ = service.triton_counts("megamolbart_decoder")
    generated = answer(service, "/generate", body)
    inferences_after, _ = service.triton_counts("megamolbart_decoder")
    assert list(generated) == ["generated"]
    assert_scored_and_ordered(generated["generated"], body)
    # Each decoding's rows, one per step until it ends, at most MAX_LENGTH steps: 8 x 3 latents decoded, no more.
    rows = body["particles"] * body["iterations"]
    assert rows <= inferences_after - inferences <= rows * MAX_LENGTH
    assert answer(service, "/generate", body) == generated  # the same seed, the same molecules
    # The default is trained (weights/megamolbart-moses): the search finds num_molecules at least as good as caffeine.
    assert len(generated["generated"]) == body["num_molecules"]
    assert generated["generated"][0]["score"] >= qed(CAFFEINE)


@pytest.mark.parametrize(
    "changes",
    [{"algorithm": "none", "scaled_radius": 1.0}, {"property_name": "plogP", "minimize": True}],
    ids=["none", "minimize-plogP"],
)
def test_generate_by_sampling_or_minimizing_plogp_answers_scored_molecules(
    service: RunningService, changes: dict[str, Any]
) -> None:
    body = {**CMA_ES, **changes, "seed": 2}
    generated = answer(service, "/generate", body)["generated"]
    assert_scored_and_ordered(generated, body)
    # Distinct valid molecules only, at most num_molecules: 8 particles of the small default find a few, not always 5.
    assert 1 <= len(generated) <= body["num_molecules"]
    assert len({molecule["smiles"] for molecule in generated}) == len(generated)
    seed_score = {"QED": qed, "plogP": penalized_logp}[body["property_name"]](CAFFEINE)
    # Something at least as good as the seed is found, above the similarity floor or not (the floor orders them).
    scores = [molecule["score"] for molecule in generated]
    assert (min(scores) <= seed_score) if body["minimize"] else (max(scores) >= seed_score)


BAD = [
    ("/generate", {**CMA_ES, "smi": "C1CC"}, "smi", "not a valid SMILES"),
    ("/generate", {**CMA_ES, "particles": 1}, "particles", "greater than or equal to 2"),
    ("/generate", {**CMA_ES, "property_name": "logP"}, "property_name", "'QED' or 'plogP'"),
    ("/sampling", {"sequences": [CAFFEINE, "C1CC"]}, "sequences[1]", "not a valid SMILES"),
    ("/decode", {"hiddens": [[[0.5] * 3]], "mask": [[True]]}, "hiddens[0]", "values (the model's hidden size)"),
]


@pytest.mark.parametrize(("path", "body", "field", "message"), BAD, ids=[f"{p}-{f}" for p, _, f, _ in BAD])
def test_a_bad_field_is_a_422_naming_it(service: RunningService, path: str, body: Any, field: str, message: str) -> None:
    response = post(service, path, body)
    assert response.status_code == 422, response.text
    with pytest.raises(requests.HTTPError):  # what a NIM client's raise_for_status() does with it
        response.raise_for_status()
    assert any(d["field"] == field and message in d["message"] for d in response.json()["error"]["details"]), response.text


def test_a_search_that_cannot_finish_in_time_is_a_503_at_once(service: RunningService) -> None:
    """The NIM's largest search, 1,000 particles x 1,000 iterations, is refused before any decoding."""
    inferences, _ = service.triton_counts("megamolbart_decoder")
    response = post(service, "/generate", {**CMA_ES, "particles": 1000, "iterations": 1000})
    assert response.status_code == 503 and "send less in one request" in response.text, response.text
    assert int(response.headers["Retry-After"]) >= 1
    assert service.triton_counts("megamolbart_decoder")[0] == inferences
