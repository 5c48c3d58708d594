"""End to end: real `bentoml serve` + real tritonserver, checked against transformers with the same weights."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
from transformers import AutoConfig

from bionemo_serving.model_catalog import MODELS, TokenizerKind
from bionemo_serving.preprocessing.protein_tokenizer import STANDARD_RESIDUES
from support.paths import CHECKPOINTS
from support.reference import TOLERANCE, TransformersReference, mixed_sequences
from support.service import RunningService

pytestmark = pytest.mark.e2e

PROTEIN_MODELS = [name for name, d in MODELS.items() if d.tokenizer is not TokenizerKind.SMILES]


def random_sequences(count: int, seed: int, longest: int = 400) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(STANDARD_RESIDUES), size=int(rng.integers(1, longest)))) for _ in range(count)]


@pytest.fixture(scope="module", params=PROTEIN_MODELS)
def model(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def reference(model: str) -> TransformersReference:
    return TransformersReference(model)


def test_embed_matches_transformers(service: RunningService, model: str, reference: TransformersReference) -> None:
    sequences = mixed_sequences(model)
    response = service.post("/embed", {"sequences": sequences, "model": model})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["model"] == model and len(answer["embeddings"]) == len(sequences)
    for sequence, vector in zip(sequences, answer["embeddings"]):
        expected = reference.mean_embedding(sequence)
        assert answer["dim"] == len(vector) == expected.shape[0]
        assert np.abs(np.asarray(vector) - expected).max() < TOLERANCE


def test_hidden_matches_transformers(service: RunningService, model: str, reference: TransformersReference) -> None:
    sequences = mixed_sequences(model)
    response = service.post("/hidden", {"sequences": sequences, "model": model})
    assert response.status_code == 200, response.text
    answer = response.json()
    hiddens, mask = np.asarray(answer["hiddens"]), np.asarray(answer["mask"])
    assert hiddens.shape[:2] == mask.shape and hiddens.shape[2] == answer["dim"]
    for row, sequence in enumerate(sequences):
        expected = reference.hidden_states(sequence)
        assert mask[row].tolist() == [1] * len(expected) + [0] * (mask.shape[1] - len(expected))
        assert np.abs(hiddens[row, : len(expected)] - expected).max() < TOLERANCE
        assert not hiddens[row, len(expected) :].any()


def test_normalized_ndarray_embeddings(service: RunningService, model: str, reference: TransformersReference) -> None:
    sequences = random_sequences(3, seed=7)
    response = service.post("/embed/ndarray", {"sequences": sequences, "model": model, "normalize": True})
    assert response.status_code == 200, response.text
    vectors = np.asarray(response.json(), dtype=np.float32)
    for sequence, vector in zip(sequences, vectors):
        expected = reference.mean_embedding(sequence)
        assert np.abs(vector - expected / np.linalg.norm(expected)).max() < TOLERANCE


def test_long_rows_merged_into_one_batch_run_in_pieces_and_keep_their_order(
    service: RunningService, model: str, reference: TransformersReference
) -> None:
    """Rows of one length bucket go to Triton as one batch; at the longest bucket the backend runs them one by one
    (MODELS[...].batching.attention_budget), and the answers must still land in their rows."""
    limit, budget = MODELS[model].max_length, MODELS[model].batching.attention_budget
    rows_per_piece = budget // (limit + 2) ** 2  # (the tokens of the top bucket: the limit and <= 2 special ones)
    rng = np.random.default_rng(9)
    sequences = ["".join(rng.choice(list(STANDARD_RESIDUES), size=limit - row)) for row in range(rows_per_piece + 2)]
    response = service.post("/embed", {"sequences": sequences, "model": model})
    assert response.status_code == 200, response.text
    for sequence, vector in zip(sequences, response.json()["embeddings"]):
        assert np.abs(np.asarray(vector) - reference.mean_embedding(sequence)).max() < TOLERANCE


def test_truncate_uses_the_first_residues_and_says_which(
    service: RunningService, model: str, reference: TransformersReference
) -> None:
    limit = MODELS[model].max_length
    rng = np.random.default_rng(5)
    over = "".join(rng.choice(list(STANDARD_RESIDUES), size=limit + 37))
    body = {"sequences": ["MKTAYIAKQR", over], "model": model, "truncate": True}
    embedded, hidden = service.post("/embed", body), service.post("/hidden", body)
    assert embedded.status_code == hidden.status_code == 200, embedded.text + hidden.text
    assert embedded.json()["truncated"] == hidden.json()["truncated"] == [1]
    expected = reference.hidden_states(over[:limit])
    assert np.abs(np.asarray(embedded.json()["embeddings"][1]) - expected[reference.residues].mean(axis=0)).max() < TOLERANCE
    assert sum(hidden.json()["mask"][1]) == len(expected)
    assert np.abs(np.asarray(hidden.json()["hiddens"][1])[: len(expected)] - expected).max() < TOLERANCE
    assert service.post("/embed", {**body, "truncate": False}).status_code == 422
    assert service.post("/embed", {**body, "sequences": ["MKTAYIAKQR"]}).json()["truncated"] == []


def test_cls_pooling_is_the_first_token(service: RunningService) -> None:
    reference = TransformersReference("esm2nv")
    sequences = random_sequences(2, seed=3)
    response = service.post("/embed", {"sequences": sequences, "pooling": "cls"})
    assert response.status_code == 200, response.text
    for sequence, vector in zip(sequences, response.json()["embeddings"]):
        assert np.abs(np.asarray(vector) - reference.hidden_states(sequence)[0]).max() < TOLERANCE


def test_more_sequences_than_one_triton_batch(service: RunningService) -> None:
    reference = TransformersReference("esm2nv")
    sequences = random_sequences(MODELS["esm2nv"].batching.max_batch_size + 9, seed=1)
    response = service.post("/embed", {"sequences": sequences, "model": "esm2nv"})
    assert response.status_code == 200, response.text
    for sequence, vector in zip(sequences, response.json()["embeddings"]):
        assert np.abs(np.asarray(vector) - reference.mean_embedding(sequence)).max() < TOLERANCE


def test_concurrent_requests_to_every_model(service: RunningService) -> None:
    references = {name: TransformersReference(name) for name in PROTEIN_MODELS}
    sent = [(PROTEIN_MODELS[i % len(PROTEIN_MODELS)], random_sequences(1 + i % 3, seed=100 + i, longest=200)) for i in range(12)]
    with ThreadPoolExecutor(max_workers=12) as pool:
        responses = list(pool.map(lambda job: service.post("/embed", {"model": job[0], "sequences": job[1]}), sent))
    for (model, sequences), response in zip(sent, responses):
        assert response.status_code == 200, response.text
        for sequence, vector in zip(sequences, response.json()["embeddings"]):
            assert np.abs(np.asarray(vector) - references[model].mean_embedding(sequence)).max() < TOLERANCE


def test_models_lists_every_served_model(service: RunningService) -> None:
    for method in (requests.get, requests.post):
        listed = {m["name"]: m for m in method(f"{service.url}/models", timeout=60).json()["models"]}
        assert set(listed) == set(MODELS)
    for name, info in listed.items():
        description = MODELS[name]
        assert info["version"] == 1 and info["max_length"] == description.max_length
        assert info["capabilities"] == sorted(c.value for c in description.capabilities)
        assert info["tokenizer"] == description.tokenizer.value
        assert info["hidden_size"] == AutoConfig.from_pretrained(CHECKPOINTS / name).hidden_size
        assert info["weights"] == description.default_weights  # `make models` exports the defaults: where they came from


def test_openapi_documents_every_endpoint(service: RunningService) -> None:
    paths = requests.get(f"{service.url}/docs.json", timeout=60).json()["paths"]
    for route in (
        "/embed", "/embed/ndarray", "/hidden", "/decode", "/decode/ndarray", "/generate", "/models", "/v1/embeddings",
        "/v1/models",
    ):
        assert route in paths
    assert "pooling" in str(paths["/embed"]) or "EmbedRequest" in str(paths["/embed"])


def test_concurrent_requests_of_different_lengths_share_model_runs(service: RunningService) -> None:
    """Padded to length buckets, requests of 40 to 71 residues take a few shapes, so Triton's batcher merges them."""
    rng = np.random.default_rng(9)
    sequences = ["".join(rng.choice(list(STANDARD_RESIDUES), size=length)) for length in range(40, 72)]
    inferences, executions = service.triton_counts("esm2nv")
    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(lambda sequence: service.post("/embed", {"sequences": [sequence]}), sequences))
    assert [answer.status_code for answer in answers] == [200] * 32
    inferences_after, executions_after = service.triton_counts("esm2nv")
    assert inferences_after - inferences == 32
    assert executions_after - executions < 32, "no two requests shared a model run"


@pytest.mark.parametrize(("dtype", "tolerance"), [("float32", 0.0), ("float16", 2e-3)])
def test_base64_answers_carry_the_same_arrays(service: RunningService, dtype: str, tolerance: float) -> None:
    body = {"model": "esm2nv", "sequences": ["MKTAYIAKQR", "MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL"]}
    compact = {**body, "encoding_format": "base64", "dtype": dtype}
    for path, key in (("/embed", "embeddings"), ("/hidden", "hiddens")):
        numbers, packed = service.post(path, body).json(), service.post(path, compact).json()
        assert (packed["encoding_format"], packed["dtype"]) == ("base64", dtype)
        expected = np.asarray(numbers[key], dtype=np.float32)
        little_endian = np.dtype(dtype).newbyteorder("<")
        decoded = np.stack([np.frombuffer(base64.b64decode(row), dtype=little_endian) for row in packed[key]])
        np.testing.assert_allclose(decoded.reshape(expected.shape), expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize(("field", "value"), [("encoding_format", "base85"), ("dtype", "float64")])
def test_an_unknown_encoding_is_a_422_naming_the_field(service: RunningService, field: str, value: str) -> None:
    response = service.post("/embed", {"sequences": ["MKTAYIAKQR"], field: value})
    assert response.status_code == 422
    assert [detail["field"] for detail in response.json()["error"]["details"]] == [field]
