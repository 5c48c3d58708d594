"""BentoML's own HTTP clients (`bentoml.client`, built from /docs.json) against the running service: a method per
API answering what curl gets, model outputs equal to transformers', and bad input raised with the JSON error."""

from __future__ import annotations

import ast
import asyncio
import json
from typing import Any, NamedTuple

import io

import bentoml
import numpy as np
import pandas as pd
import pytest
import requests

from support.bentoml_clients import BAD_REQUESTS, MOLECULES, PROTEIN, PUBLIC_APIS, through_curl
from support.reference import TOLERANCE, TransformersReference, mixed_sequences
from support.service import RunningService

pytestmark = pytest.mark.e2e

class Call(NamedTuple):
    api: str
    route: str
    given: Any
    """What the client method is given."""
    body: Any
    """The JSON body curl sends for the same request."""


@pytest.fixture(scope="module")
def calls(molecule_hiddens: dict[str, Any]) -> list[Call]:
    """One call of every public API."""
    protein = {"model": PROTEIN, "sequences": mixed_sequences(PROTEIN)}
    short = {"model": PROTEIN, "sequences": ["MKTAYIAKQR", "M"]}
    decode = {"hiddens": molecule_hiddens["hiddens"], "mask": molecule_hiddens["mask"], "max_length": 20}
    latents = np.asarray(molecule_hiddens["hiddens"], dtype=np.float32)
    generate = {"smiles": MOLECULES, "num_samples": 2, "seed": 11, "max_length": 20}
    masked = {"model": PROTEIN, "sequences": ["MKTA<mask>IAKQR", "M"]}
    score = {"model": PROTEIN, "sequence": "MKTAYIAKQR", "mutations": ["K2R", "T3A:Y5W"]}
    return [
        Call("embed", "embed", protein, protein),
        Call("embed_ndarray", "embed/ndarray", protein, protein),
        Call("hidden", "hidden", short, short),
        Call("logits", "logits", masked, masked),
        Call("score", "score", score, score),
        Call("contacts", "contacts", short, short),
        Call("decode", "decode", decode, decode),
        Call("decode_ndarray", "decode/ndarray", latents, latents.tolist()),
        Call("generate", "generate", generate, generate),
        Call("models", "models", None, None),
    ]


def assert_same_answer(api: str, from_client: Any, from_curl: requests.Response) -> None:
    assert from_curl.status_code == 200, from_curl.text
    if api == "embed_ndarray":
        assert isinstance(from_client, np.ndarray) and from_client.dtype == np.float32
        expected = np.asarray(from_curl.json(), dtype=np.float32)
        assert from_client.shape == expected.shape
        np.testing.assert_array_equal(from_client, expected)
    else:
        assert from_client == from_curl.json()


def error_of(raised: BaseException) -> tuple[int, dict[str, Any]]:
    """The status and JSON body in BentoML's client error `Error making request: 422: b'{...}'`."""
    status, body = str(raised).removeprefix("Error making request: ").split(": ", 1)
    return int(status), json.loads(ast.literal_eval(body))


def test_every_public_api_is_a_client_method(service: RunningService) -> None:
    client = bentoml.client.Client.from_url(service.url)
    assert set(client.endpoints) == PUBLIC_APIS  # no admin APIs: BIONEMO_ADMIN_TOKEN is not set
    assert all(callable(getattr(client, api)) for api in PUBLIC_APIS)


def test_the_sync_client_answers_what_curl_gets(service: RunningService, calls: list[Call]) -> None:
    client = bentoml.client.Client.from_url(service.url)
    for call in calls:
        answer = getattr(client, call.api)(call.given)
        assert_same_answer(call.api, answer, through_curl(service, call.route, call.body))


def test_the_async_client_answers_what_curl_gets(service: RunningService, calls: list[Call]) -> None:
    async def ask_all() -> list[Any]:
        client = await bentoml.client.AsyncClient.from_url(service.url)
        try:
            return await asyncio.gather(*(getattr(client, call.api)(call.given) for call in calls))
        finally:
            await client.close()

    for call, answer in zip(calls, asyncio.run(ask_all())):
        assert_same_answer(call.api, answer, through_curl(service, call.route, call.body))


def test_embeddings_and_hidden_states_match_transformers(service: RunningService) -> None:
    """Mixed lengths (1 residue to the model's limit) in one request, through the sync client: /embed's JSON,
    /embed/ndarray's array and /hidden."""
    reference = TransformersReference(PROTEIN)
    sequences = mixed_sequences(PROTEIN)
    client = bentoml.client.Client.from_url(service.url)
    embedded = client.embed({"model": PROTEIN, "sequences": sequences})
    vectors = client.embed_ndarray({"model": PROTEIN, "sequences": sequences})
    hidden = client.hidden({"model": PROTEIN, "sequences": sequences})
    hiddens, mask = np.asarray(hidden["hiddens"], dtype=np.float32), np.asarray(hidden["mask"])
    assert vectors.shape == (len(sequences), hidden["dim"]) and hiddens.shape[:2] == mask.shape
    assert np.asarray(embedded["embeddings"]).shape == vectors.shape
    for row, sequence in enumerate(sequences):
        expected = reference.hidden_states(sequence)
        mean = reference.mean_embedding(sequence)
        for vector in (np.asarray(embedded["embeddings"][row]), vectors[row]):
            assert np.abs(vector - mean).max() < TOLERANCE
        assert mask[row].tolist() == [1] * len(expected) + [0] * (mask.shape[1] - len(expected))
        assert np.abs(hiddens[row, : len(expected)] - expected).max() < TOLERANCE


@pytest.mark.parametrize(("api", "body", "field"), BAD_REQUESTS)
def test_bad_input_raises_the_status_and_the_json_error(
    service: RunningService, api: str, body: Any, field: str
) -> None:
    client = bentoml.client.Client.from_url(service.url)
    with pytest.raises(bentoml.exceptions.BentoMLException) as raised:
        getattr(client, api)(body)
    status, error = error_of(raised.value)
    expected = through_curl(service, api, body)
    assert (status, error) == (expected.status_code, expected.json())
    assert status == 422 and [detail["field"] for detail in error["error"]["details"]] == [field]


@pytest.mark.parametrize(("api", "body", "field"), BAD_REQUESTS)
def test_bad_input_raises_in_the_async_client_too(service: RunningService, api: str, body: Any, field: str) -> None:
    async def ask() -> None:
        client = await bentoml.client.AsyncClient.from_url(service.url)
        try:
            await getattr(client, api)(body)
        finally:
            await client.close()

    with pytest.raises(bentoml.exceptions.BentoMLException) as raised:
        asyncio.run(ask())
    status, error = error_of(raised.value)
    assert status == 422 and [detail["field"] for detail in error["error"]["details"]] == [field]
    assert error == through_curl(service, api, body).json()


def test_a_dataframe_goes_as_parquet_and_comes_back_a_dataframe_as_in_run_in_spark(service: RunningService) -> None:
    """BentoML's HTTPClient is what bentoml.batch.run_in_spark calls in each task (docs/spark.md): /embed/dataframe
    answers /embed's embeddings in the rows' order, as float32; a bad row raises the 422 naming it."""
    client = bentoml.client.Client.from_url(service.url)
    sequences = mixed_sequences(PROTEIN)
    answer = client.embed_dataframe(pd.DataFrame({"id": range(len(sequences)), "sequence": sequences}))
    assert isinstance(answer, pd.DataFrame) and answer["id"].tolist() == list(range(len(sequences)))
    assert all(vector.dtype == np.float32 for vector in answer["embedding"])
    expected = np.asarray(through_curl(service, "embed", {"sequences": sequences}).json()["embeddings"], np.float32)
    np.testing.assert_allclose(np.stack(answer["embedding"]), expected, rtol=0, atol=1e-5)
    with pytest.raises(bentoml.exceptions.BentoMLException) as raised:
        client.embed_dataframe(pd.DataFrame({"id": ["a", "b"], "sequence": ["MKT", "MKJ"]}))
    status, error = error_of(raised.value)
    assert status == 422 and [detail["field"] for detail in error["error"]["details"]] == ["rows[1].sequence"]
    assert "(id 'b')" in error["error"]["message"]
    curl = requests.post(f"{service.url}/embed/dataframe", json=[{"id": 1, "sequence": "MKT"}], timeout=60)
    assert curl.headers["content-type"] == "application/vnd.apache.parquet"
    assert pd.read_parquet(io.BytesIO(curl.content))["id"].tolist() == [1]
