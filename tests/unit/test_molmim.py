"""MolMIM's NIM API (bionemo_serving/fronts/molmim/) in this process, through the same descriptors, routes and engine as the
service, over the fake runner whose decoder climbs test_optimization.py's ladder: the shapes a NIM client reads, the
NIM's fields in every error, its lax reading of numbers and booleans."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bionemo_serving.preprocessing.smiles import canonical_smiles
from bionemo_serving.model_catalog import DEFAULT_MOLECULE_MODEL
from support.in_process import InProcessService
from support.ladder import HIDDEN, LADDER, SEED, LadderRunner


@pytest.fixture(scope="module")
def nim() -> InProcessService:
    return InProcessService(LadderRunner())


def test_generate_answers_the_nims_shape(nim: InProcessService) -> None:
    body = {"smi": SEED, "num_molecules": 3, "property_name": "QED", "minimize": False, "min_similarity": 0.5,
            "particles": 20, "iterations": 8, "seed": 5}  # fmt: skip
    answer = nim.post("/molmim/generate", body)
    assert answer.status == 200, answer.body
    generated = answer.json()["generated"]
    assert list(answer.json()) == ["generated"] and len(generated) == 3
    assert all(set(molecule) == {"smiles", "score", "similarity"} for molecule in generated)
    assert generated[0]["smiles"] == canonical_smiles(LADDER[8]) and generated[0]["similarity"] >= 0.5
    assert nim.post("/molmim/generate", {**body, "algorithm": "none"}).status == 200


def test_sampling_hidden_decode_and_embedding_answer_the_nims_shapes(nim: InProcessService) -> None:
    sampled = nim.post("/molmim/sampling", {"sequences": [SEED, "CCO"], "num_molecules": 3, "beam_size": 2}).json()
    assert list(sampled) == ["generated"] and [len(samples) for samples in sampled["generated"]] == [3, 3]
    assert all(isinstance(smiles, str) for samples in sampled["generated"] for smiles in samples)
    hidden = nim.post("/molmim/hidden", {"sequences": [SEED, "CCO"]}).json()
    assert list(hidden) == ["hiddens", "mask"]
    assert np.asarray(hidden["hiddens"]).shape == (2, len(hidden["mask"][0]), HIDDEN)
    assert hidden["mask"][1] == [True] * 3 + [False] * (len(hidden["mask"][1]) - 3)
    decoded = nim.post("/molmim/decode", hidden).json()  # what a NIM client does: /hidden's answer sent back
    assert decoded["generated"] == [LadderRunner().decoded(np.asarray(h, dtype=np.float32)) for h in hidden["hiddens"]]
    embedded = nim.post("/molmim/embedding", {"sequences": [SEED]}).json()
    native = nim.post("/embed", {"model": DEFAULT_MOLECULE_MODEL, "sequences": [SEED]}).json()
    assert list(embedded) == ["embeddings"] and embedded["embeddings"] == native["embeddings"]


BAD = [
    ("/molmim/generate", {"smi": "C1CC"}, "smi", "not a valid SMILES"),
    ("/molmim/generate", {}, "smi", "Field required"),
    ("/molmim/generate", {"smi": SEED, "particles": 1}, "particles", "greater than or equal to 2"),
    ("/molmim/generate", {"smi": SEED, "iterations": 1001}, "iterations", "less than or equal to 1000"),
    ("/molmim/generate", {"smi": SEED, "num_molecules": 101}, "num_molecules", "less than or equal to 100"),
    ("/molmim/generate", {"smi": SEED, "min_similarity": 0.8}, "min_similarity", "less than or equal to 0.7"),
    ("/molmim/generate", {"smi": SEED, "property_name": "logP"}, "property_name", "'QED' or 'plogP'"),
    ("/molmim/generate", {"smi": SEED, "algorithm": "GA"}, "algorithm", "'CMA-ES' or 'none'"),
    ("/molmim/generate", {"smi": SEED, "scaled_radius": 0}, "scaled_radius", "CMA-ES's initial step size"),
    ("/molmim/generate", {"smi": SEED, "particle": 20}, "particle", "Extra inputs are not permitted"),
    ("/molmim/sampling", {"sequences": [SEED, "C1CC"]}, "sequences[1]", "not a valid SMILES"),
    ("/molmim/sampling", {"sequences": [SEED], "num_molecules": 11}, "num_molecules", "less than or equal to 10"),
    ("/molmim/sampling", {"sequences": [SEED], "beam_size": 0}, "beam_size", "greater than or equal to 1"),
    ("/molmim/sampling", {"sequences": [SEED] * 65}, "sequences", "at most 64"),
    ("/molmim/hidden", {"sequences": ["CCO", "CC[Xx]"]}, "sequences[1]", "not a valid SMILES"),
    ("/molmim/embedding", {"sequences": []}, "sequences", "at least 1 item"),
    ("/molmim/decode", {"hiddens": [[[0.5] * HIDDEN]], "mask": [[True], [True]]}, "mask", "has 2 rows"),
    ("/molmim/decode", {"hiddens": [[[0.5] * 3]], "mask": [[True]]}, "hiddens[0]", f"needs {HIDDEN} values"),
    ("/molmim/decode", {"hiddens": [[[0.5] * HIDDEN]], "mask": [[2]]}, "mask[0][0]", "valid boolean"),
]


@pytest.mark.parametrize(("path", "body", "field", "message"), BAD, ids=[f"{p}-{f}" for p, _, f, _ in BAD])
def test_bad_input_is_a_422_naming_the_nims_field(path: str, body: dict[str, Any], field: str, message: str) -> None:
    routes = InProcessService(LadderRunner())
    answer = routes.post(path, body)
    assert answer.status == 422, answer.body
    assert any(d["field"] == field and message in d["message"] for d in answer.error["details"]), answer.error
    assert routes.runner.calls == []


def test_numbers_and_booleans_are_read_as_the_nims_fastapi_reads_them(nim: InProcessService) -> None:
    """Lax, as pydantic's default: "10" is 10, a mask's 1 is true."""
    answer = nim.post("/molmim/generate", {"smi": SEED, "particles": "4", "iterations": "2", "minimize": "false"})
    assert answer.status == 200, answer.body
    hidden = nim.post("/molmim/hidden", {"sequences": ["CCO"]}).json()
    as_numbers = {**hidden, "mask": [[1, 1, 1]]}
    assert nim.post("/molmim/decode", as_numbers).json() == nim.post("/molmim/decode", hidden).json()
