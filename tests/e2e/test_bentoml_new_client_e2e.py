"""BentoML 1.4's new clients (`bentoml.SyncHTTPClient`, `bentoml.AsyncHTTPClient`, built from /schema.json) against
the running service: a method per API called by keyword, answering what curl gets, and bad input raised as
BentoML's exception for the status, carrying the status and the service's JSON error."""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any, NamedTuple

import io

import bentoml
import numpy as np
import pandas as pd
import pytest
import requests
from bentoml.exceptions import BentoMLException, UnprocessableEntity

from support.bentoml_clients import BAD_REQUESTS, MOLECULES, PROTEIN, PUBLIC_APIS, through_curl
from support.reference import mixed_sequences
from support.service import RunningService

pytestmark = pytest.mark.e2e

TIMEOUT_S = 120
"""The clients' own default is 30 s: too short for a protein at the length limit on a shared 2-core machine."""
OPENAI_BAD_REQUEST = pytest.param(
    "openai_embeddings", {"model": PROTEIN, "input": ["MKT", "MJT"]}, "input[1]", id="openai-bad-residue"
)


ROUTES = {"openai_embeddings": "v1/embeddings"}
"""Each API's route where it is not the API's name."""


class Call(NamedTuple):
    api: str
    route: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    """What the client method is given: keyword arguments, or the ndarray input as its one positional argument."""
    body: Any
    """The JSON body curl sends for the same request."""


def sync_client(service: RunningService) -> bentoml.SyncHTTPClient:
    return bentoml.SyncHTTPClient(service.url, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def calls(molecule_hiddens: dict[str, Any]) -> list[Call]:
    """One call of every public API; /embed also with base64 (a union in the answer's schema)."""
    protein = {"model": PROTEIN, "sequences": mixed_sequences(PROTEIN)}
    short = {"model": PROTEIN, "sequences": ["MKTAYIAKQR", "M"]}
    base64 = {**short, "encoding_format": "base64"}
    openai = {"model": PROTEIN, "input": ["MKTAYIAKQR", "M"]}
    decode = {"hiddens": molecule_hiddens["hiddens"], "mask": molecule_hiddens["mask"], "max_length": 20}
    latents = np.asarray(molecule_hiddens["hiddens"], dtype=np.float32)
    generate = {"smiles": MOLECULES, "num_samples": 2, "seed": 11, "max_length": 20}
    masked = {"model": PROTEIN, "sequences": ["MKTA<mask>IAKQR", "M"], "encoding_format": "base64"}
    scan = {"model": PROTEIN, "sequence": "MKTAYIAKQR", "scan": True}
    return [
        Call("embed", "embed", (), protein, protein),
        Call("embed", "embed", (), base64, base64),
        Call("embed_ndarray", "embed/ndarray", (), protein, protein),
        Call("hidden", "hidden", (), short, short),
        Call("logits", "logits", (), masked, masked),
        Call("score", "score", (), scan, scan),
        Call("contacts", "contacts", (), short, short),
        Call("decode", "decode", (), decode, decode),
        Call("decode_ndarray", "decode/ndarray", (latents,), {}, latents.tolist()),
        Call("generate", "generate", (), generate, generate),
        Call("models", "models", (), {}, None),
        Call("openai_embeddings", "v1/embeddings", (), openai, openai),
        Call("openai_models", "v1/models", (), {}, None),
    ]


def without_created(answer: dict[str, Any]) -> dict[str, Any]:
    """/v1/models' `created` is when the API worker that answered started: two requests may reach two workers."""
    assert all(isinstance(model["created"], int) for model in answer["data"])
    return {**answer, "data": [{**model, "created": None} for model in answer["data"]]}


def assert_same_answer(api: str, from_client: Any, from_curl: requests.Response) -> None:
    assert from_curl.status_code == 200, from_curl.text
    if api == "embed_ndarray":
        assert isinstance(from_client, np.ndarray) and from_client.dtype == np.float32
        expected = np.asarray(from_curl.json(), dtype=np.float32)
        assert from_client.shape == expected.shape
        np.testing.assert_array_equal(from_client, expected)
    elif api == "openai_models":
        assert without_created(from_client) == without_created(from_curl.json())
    else:
        assert from_client == from_curl.json()


def assert_carries_the_error(raised: BentoMLException, expected: requests.Response, field: str) -> None:
    """The exception is BentoML's for the status (422: UnprocessableEntity), with the status as `error_code` and the
    service's JSON error body, unchanged, as `message`."""
    assert isinstance(raised, UnprocessableEntity)
    assert raised.error_code == HTTPStatus(expected.status_code) == HTTPStatus.UNPROCESSABLE_ENTITY
    error = json.loads(raised.message)
    assert error == expected.json()
    details = error["error"].get("details") or [{"field": error["error"].get("param")}]  # OpenAI's shape: `param`
    assert [detail["field"] for detail in details] == [field]


def test_schema_json_describes_every_api_of_docs_json(service: RunningService) -> None:
    """/schema.json has a route per API of /docs.json, each JSON input with the arguments /docs.json gives it."""
    schema = requests.get(f"{service.url}/schema.json", timeout=60).json()
    document = requests.get(f"{service.url}/docs.json", timeout=60).json()
    operations = {
        operation["x-bentoml-name"]: (path, operation)
        for path, item in document["paths"].items()
        if "x-bentoml-name" in (operation := item.get("post", {}))
    }
    routes = {route["name"]: route for route in schema["routes"]}
    assert set(routes) == set(operations) == PUBLIC_APIS  # no admin APIs: BIONEMO_ADMIN_TOKEN is not set
    for name, route in routes.items():
        path, operation = operations[name]
        assert route["route"] == path and route["doc"] == operation["description"]
        request = operation["requestBody"]["content"]["application/json"]["schema"]
        if "properties" in request:
            assert list(route["input"]["properties"]) == list(request["properties"])
            assert route["input"].get("required") == request.get("required")
    assert routes["decode_ndarray"]["input"] == {
        "type": "tensor", "format": "numpy-array", "dtype": "float32", "root_input": True
    }
    assert routes["embed_ndarray"]["output"] == {"type": "tensor", "format": "numpy-array", "dtype": "float32"}
    assert routes["models"]["input"] == routes["openai_models"]["input"] == {"type": "object", "properties": {}}


def test_every_public_api_is_a_client_method(service: RunningService) -> None:
    documented = requests.get(f"{service.url}/docs.json", timeout=60).json()["paths"]["/embed"]["post"]
    with sync_client(service) as client:
        assert set(client.endpoints) == PUBLIC_APIS
        assert all(callable(getattr(client, api)) for api in PUBLIC_APIS)
        assert client.embed.__doc__ == documented["description"]


def test_the_sync_client_answers_what_curl_gets(service: RunningService, calls: list[Call]) -> None:
    with sync_client(service) as client:
        for call in calls:
            answer = getattr(client, call.api)(*call.args, **call.kwargs)
            assert_same_answer(call.api, answer, through_curl(service, call.route, call.body))


def test_the_async_client_answers_what_curl_gets(service: RunningService, calls: list[Call]) -> None:
    async def ask_all() -> list[Any]:
        async with bentoml.AsyncHTTPClient(service.url, timeout=TIMEOUT_S) as client:
            return await asyncio.gather(*(getattr(client, call.api)(*call.args, **call.kwargs) for call in calls))

    for call, answer in zip(calls, asyncio.run(ask_all())):
        assert_same_answer(call.api, answer, through_curl(service, call.route, call.body))


def test_an_ndarray_input_is_the_one_positional_argument(service: RunningService, calls: list[Call]) -> None:
    """/decode/ndarray's body is the array itself (a root input): the client takes it positionally, not by name."""
    (call,) = [call for call in calls if call.api == "decode_ndarray"]
    with sync_client(service) as client:
        with pytest.raises(TypeError, match="Expected one positional argument for root input"):
            client.decode_ndarray(hidden_states=call.args[0])
        assert client.decode_ndarray(call.args[0].tolist()) == through_curl(service, call.route, call.body).json()


def test_unknown_arguments_are_refused_before_sending(service: RunningService) -> None:
    with sync_client(service) as client:
        with pytest.raises(TypeError, match="Arguments not found in endpoint embed: {'sequence'}"):
            client.embed(sequence=["MKT"])
        with pytest.raises(TypeError, match="Missing required arguments in endpoint embed: {'sequences'}"):
            client.embed(model=PROTEIN)


@pytest.mark.parametrize(("api", "body", "field"), [*BAD_REQUESTS, OPENAI_BAD_REQUEST])
def test_bad_input_raises_the_status_and_the_json_error(
    service: RunningService, api: str, body: dict[str, Any], field: str
) -> None:
    route = ROUTES.get(api, api)
    with sync_client(service) as client:
        with pytest.raises(BentoMLException) as raised:
            getattr(client, api)(**body)
    assert_carries_the_error(raised.value, through_curl(service, route, body), field)


@pytest.mark.parametrize(("api", "body", "field"), [*BAD_REQUESTS, OPENAI_BAD_REQUEST])
def test_bad_input_raises_in_the_async_client_too(
    service: RunningService, api: str, body: dict[str, Any], field: str
) -> None:
    route = ROUTES.get(api, api)

    async def ask() -> None:
        async with bentoml.AsyncHTTPClient(service.url, timeout=TIMEOUT_S) as client:
            await getattr(client, api)(**body)

    with pytest.raises(BentoMLException) as raised:
        asyncio.run(ask())
    assert_carries_the_error(raised.value, through_curl(service, route, body), field)


def test_a_dataframe_is_sent_as_json_records_and_answered_as_parquet_bytes(service: RunningService) -> None:
    """/embed/dataframe over /schema.json: its records are the one positional argument, sent as JSON; the answer is
    the Parquet file's bytes (bionemo_serving/fronts/bentoml/schema.py)."""
    records = [{"id": "a", "sequence": "MKTAYIAKQR"}, {"id": "b", "sequence": "M"}]
    with sync_client(service) as client:
        answer = pd.read_parquet(io.BytesIO(client.embed_dataframe(records)))
    assert answer["id"].tolist() == ["a", "b"]
    expected = through_curl(service, "embed", {"sequences": ["MKTAYIAKQR", "M"]}).json()["embeddings"]
    np.testing.assert_allclose(np.stack(answer["embedding"]), np.asarray(expected, np.float32), rtol=0, atol=1e-5)
