"""End to end: OpenAI's own python client against /v1/embeddings and /v1/models of the real stack.

The vectors must be /embed's (the same request, 1e-6) and transformers' (1e-4);
bad input must raise the client's own exceptions, with the status and the item.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import openai
import pytest
import requests

from support.service import RunningService
from bionemo_serving.model_catalog import MODELS
from bionemo_serving.preprocessing import tokenizer_for
from support.reference import TOLERANCE, TransformersReference

pytestmark = pytest.mark.e2e

SEQUENCES = ["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL", "M", "mkTAyiakqr", "A" * 300, "XBUZOWC"]
SMILES = ["CC(=O)Nc1ccc(O)cc1", "C", "c1ccccc1", "CN1C=NC2=C1C(=O)N(C(=O)N2C)C"]
SAME_AS_EMBED = 1e-6


@pytest.fixture(scope="module")
def client(service: RunningService) -> openai.OpenAI:
    """No retries: a 503 must show as one, not as a slower success."""
    return openai.OpenAI(base_url=f"{service.url}/v1", api_key="unused", max_retries=0, timeout=120)


def embed(service: RunningService, model: str, sequences: list[str]) -> np.ndarray:
    response = requests.post(f"{service.url}/embed", json={"model": model, "sequences": sequences}, timeout=120)
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["embeddings"])


def vectors(answer: Any) -> np.ndarray:
    assert [item.index for item in answer.data] == list(range(len(answer.data)))
    return np.asarray([item.embedding for item in answer.data])


def test_embeddings_equal_embed_and_transformers(service: RunningService, client: openai.OpenAI) -> None:
    """The client's defaults: it asks for base64 and decodes it itself."""
    answer = client.embeddings.create(model="esm2nv", input=SEQUENCES)
    assert answer.model == "esm2nv" and answer.object == "list"
    received = vectors(answer)
    np.testing.assert_allclose(received, embed(service, "esm2nv", SEQUENCES), rtol=0, atol=SAME_AS_EMBED)
    reference = TransformersReference("esm2nv")
    for sequence, vector in zip(SEQUENCES, received):
        assert np.abs(vector - reference.mean_embedding(sequence)).max() < TOLERANCE
    read = sum(len(reference.tokenizer(sequence.upper())["input_ids"]) for sequence in SEQUENCES)  # <cls> ... <eos>
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == read


def test_float_and_base64_carry_the_same_vectors(service: RunningService, client: openai.OpenAI) -> None:
    numbers = client.embeddings.create(model="esm2nv", input=SEQUENCES, encoding_format="float")
    packed = client.embeddings.create(model="esm2nv", input=SEQUENCES, encoding_format="base64")
    assert all(isinstance(item.embedding, str) for item in packed.data)  # asked for explicitly: left to the caller
    decoded = np.stack([np.frombuffer(base64.b64decode(item.embedding), dtype="<f4") for item in packed.data])
    np.testing.assert_array_equal(decoded, np.asarray([item.embedding for item in numbers.data], dtype=np.float32))
    np.testing.assert_allclose(decoded, embed(service, "esm2nv", SEQUENCES), rtol=0, atol=SAME_AS_EMBED)


def test_one_string_is_one_input(service: RunningService, client: openai.OpenAI) -> None:
    answer = client.embeddings.create(model="esm2nv", input=SEQUENCES[0], dimensions=320, user="someone")
    assert len(answer.data) == 1 and len(answer.data[0].embedding) == 320
    np.testing.assert_allclose(vectors(answer), embed(service, "esm2nv", SEQUENCES[:1]), rtol=0, atol=SAME_AS_EMBED)


def test_megamolbart_embeds_smiles(service: RunningService, client: openai.OpenAI) -> None:
    answer = client.embeddings.create(model="megamolbart", input=SMILES)
    received = vectors(answer)
    np.testing.assert_allclose(received, embed(service, "megamolbart", SMILES), rtol=0, atol=SAME_AS_EMBED)
    reference = TransformersReference("megamolbart")
    for smiles, vector in zip(SMILES, received):
        assert np.abs(vector - reference.mean_embedding(smiles)).max() < TOLERANCE
    tokenizer = tokenizer_for(MODELS["megamolbart"])
    assert answer.usage.prompt_tokens == sum(len(tokenizer.encode(smiles)) for smiles in SMILES)


def test_models_lists_the_served_models(service: RunningService, client: openai.OpenAI) -> None:
    served = {model["name"] for model in requests.get(f"{service.url}/models", timeout=60).json()["models"]}
    listed = list(client.models.list())
    assert {model.id for model in listed} == served == set(MODELS)
    assert {(model.object, model.owned_by) for model in listed} == {("model", "bionemo")}


BAD_REQUESTS = [
    ({"model": "esm9", "input": ["MKT"]}, "model", "'esm9' is not served"),
    ({"model": "esm2nv", "input": ["MKT", "MJT"]}, "input[1]", "character 'J' at position 1 is not an amino acid"),
    ({"model": "megamolbart", "input": ["CCO", "C(("]}, "input[1]", "not a valid SMILES"),
]
"""One bad body of each kind through OpenAI's client and the real stack (the model, a protein, a molecule); the whole
table runs in-process (tests/unit/test_validation.py's OPENAI_BAD)."""


@pytest.mark.parametrize(("body", "param", "message"), BAD_REQUESTS, ids=[param for _, param, _ in BAD_REQUESTS])
def test_bad_input_raises_the_clients_error_naming_the_item(
    client: openai.OpenAI, body: dict[str, Any], param: str, message: str
) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        client.embeddings.create(**body)
    error = raised.value
    assert error.status_code == 422 and error.param == param, error.body
    assert message in error.message and f"{param}: " in error.message, error.message
    assert "truncate" not in error.message  # this API has no field to ask for it
    assert error.type == "invalid_request_error"


def test_an_unknown_field_is_refused_by_name(client: openai.OpenAI) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        client.embeddings.create(model="esm2nv", input="MKT", extra_body={"truncate": True})
    assert raised.value.param == "truncate"


def test_an_unreadable_body_has_openais_error_shape(service: RunningService) -> None:
    """One unreadable body against the real stack; the others in-process (test_validation.py)."""
    headers = {"content-type": "application/json"}
    response = requests.post(f"{service.url}/v1/embeddings", data=b"{not json", headers=headers, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == "body"
    assert error["type"] == "invalid_request_error"
