"""End to end: real `bentoml serve` + real tritonserver, checked against transformers with the same weights."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import torch
from transformers import EsmModel, EsmTokenizer

from conftest import RunningService
from model_catalog import MODELS
from preprocessing.esm_tokenizer import RESIDUES

MAX_RESIDUES = MODELS["esm2nv"].max_residues
TOLERANCE = 1e-4


def random_sequences(count: int, seed: int, longest: int = 400) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(RESIDUES[:20]), size=int(rng.integers(1, longest)))) for _ in range(count)]


class Reference:
    """transformers.EsmModel from the checkpoint the service's model was exported from, one sequence at a time."""

    def __init__(self, checkpoint: Path) -> None:
        self.model = EsmModel.from_pretrained(checkpoint, add_pooling_layer=False).eval()
        self.tokenizer = EsmTokenizer.from_pretrained(checkpoint)

    def embed(self, sequence: str) -> np.ndarray:
        tokens = self.tokenizer(sequence.upper(), return_tensors="pt")
        with torch.inference_mode():
            hidden = self.model(**tokens).last_hidden_state[0]
        return hidden[1:-1].mean(dim=0).numpy()  # residues only: not <cls>, not <eos>


@pytest.fixture(scope="module")
def reference(default_checkpoint: Path) -> Reference:
    return Reference(default_checkpoint)


def embed(service: RunningService, body: Any, **kwargs: Any) -> requests.Response:
    return requests.post(f"{service.url}/embed", json=body, timeout=120, **kwargs)


def assert_matches_reference(reference: Reference, sequences: list[str], answer: dict[str, Any]) -> None:
    assert answer["model"] == "esm2nv"
    assert len(answer["embeddings"]) == len(sequences)
    for sequence, vector in zip(sequences, answer["embeddings"]):
        expected = reference.embed(sequence)
        assert answer["dim"] == len(vector) == expected.shape[0]
        assert np.abs(np.asarray(vector) - expected).max() < TOLERANCE


def test_mixed_lengths_in_one_request(service: RunningService, reference: Reference) -> None:
    sequences = ["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL", "M", "mkTAyiakqr", "A" * MAX_RESIDUES, "XBUZOWC"]
    response = embed(service, {"sequences": sequences})
    assert response.status_code == 200, response.text
    assert_matches_reference(reference, sequences, response.json())


def test_more_sequences_than_one_triton_batch(service: RunningService, reference: Reference) -> None:
    sequences = random_sequences(MODELS["esm2nv"].batching.max_batch_size + 9, seed=1)
    response = embed(service, {"sequences": sequences, "model": "esm2nv"})
    assert response.status_code == 200, response.text
    assert_matches_reference(reference, sequences, response.json())


def test_concurrent_requests(service: RunningService, reference: Reference) -> None:
    requests_sent = [random_sequences(1 + i % 3, seed=100 + i, longest=200) for i in range(12)]
    with ThreadPoolExecutor(max_workers=12) as pool:
        responses = list(pool.map(lambda sequences: embed(service, {"sequences": sequences}), requests_sent))
    for sequences, response in zip(requests_sent, responses):
        assert response.status_code == 200, response.text
        assert_matches_reference(reference, sequences, response.json())


BAD_INPUTS = [
    pytest.param(b"{not json", 400, "body", "not valid JSON", id="not-json"),
    pytest.param({}, 422, "sequences", "Field required", id="missing-field"),
    pytest.param({"sequences": []}, 422, "sequences", "at least 1 item", id="empty-list"),
    pytest.param({"sequences": "MKT"}, 422, "sequences", "valid array", id="string-not-list"),
    pytest.param({"sequences": ["MKT", 5]}, 422, "sequences[1]", "valid string", id="number-in-list"),
    pytest.param({"sequences": ["MKT", ""]}, 422, "sequences[1]", "sequence is empty", id="empty-sequence"),
    pytest.param({"sequences": ["MKT", "MKJL"]}, 422, "sequences[1]", "character 'J' at position 2", id="bad-char"),
    pytest.param({"sequences": ["A" * (MAX_RESIDUES + 1)]}, 422, "sequences[0]", f"at most {MAX_RESIDUES}", id="too-long"),
    pytest.param({"sequences": ["MKT"] * 65}, 422, "sequences", "at most 64 items", id="too-many"),
    pytest.param({"sequences": ["MKT"], "model": "esm9"}, 422, "model", "'esm9' is not served", id="unknown-model"),
    pytest.param({"sequences": ["MKT"], "pooling": "max"}, 422, "pooling", "Extra inputs", id="unknown-field"),
    pytest.param([["MKT"]], 422, "body", "should be an object", id="list-body"),
]


@pytest.mark.parametrize(("body", "status", "field", "message"), BAD_INPUTS)
def test_bad_input_is_a_4xx_naming_the_field(
    service: RunningService, body: Any, status: int, field: str, message: str
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = requests.post(
        f"{service.url}/embed", data=raw, headers={"content-type": "application/json"}, timeout=60
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert any(d["field"] == field and message in d["message"] for d in error["details"]), error
    assert embed(service, {"sequences": ["MKT"]}).status_code == 200  # still healthy


def test_every_bad_sequence_is_reported(service: RunningService) -> None:
    response = embed(service, {"sequences": ["MKT", "", "MK1"]})
    assert response.status_code == 422
    assert [d["field"] for d in response.json()["error"]["details"]] == ["sequences[1]", "sequences[2]"]


def test_wrong_content_type_is_415(service: RunningService) -> None:
    response = requests.post(f"{service.url}/embed", data={"sequences": "MKT"}, timeout=60)
    assert response.status_code == 415
    assert response.json()["error"]["details"][0]["field"] == "content-type"


def test_openapi_documents_embed(service: RunningService) -> None:
    spec = requests.get(f"{service.url}/docs.json", timeout=60).json()
    schema = json.dumps(spec["paths"]["/embed"])
    assert "sequences" in json.dumps(spec) and "post" in spec["paths"]["/embed"], schema
