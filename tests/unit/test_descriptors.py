"""BentoML's IO descriptors as the service extends them: every body it cannot use is a typed error (415, 413, 400,
422 naming the field, 401 before the body is read), and every typed error is answered with its status, headers and
one JSON error shape (OpenAI's for the OpenAI front). Requests are starlette's, built from an ASGI scope."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from google.protobuf import struct_pb2

from bionemo_serving.errors import (
    ERROR_TYPES,
    HTTP_STATUS,
    InvalidRequest,
    MalformedBody,
    ModelUnavailable,
    Overloaded,
    OverShare,
    PayloadTooLarge,
    ServiceError,
    Unauthorized,
    UnsupportedMediaType,
    error_headers,
)
from bionemo_serving.fronts.bentoml.admin import AdminJSON
from bionemo_serving.fronts.bentoml.descriptors import (
    JSONOutput,
    NdarrayOutput,
    ValidatedJSON,
    ValidatedNdarray,
    field_path,
)
from bionemo_serving.fronts.native.protocol import AdminModelRequest, DecodeRequest, EmbedRequest
from bionemo_serving.fronts.openai.routes import OpenAIJSONOutput
from support.in_process import Body, http_request

LIMIT = 1000
TOKEN = "a-token-of-twenty-four-chars"


def read(descriptor: Any, body: bytes, headers: dict[str, str] | None = None, chunk_size: int | None = None) -> Any:
    """What the input descriptor makes of a POST of `body`."""
    return asyncio.run(descriptor.from_http_request(http_request("/any", Body(body, chunk_size), headers)))


def embed_body(**fields: Any) -> bytes:
    return json.dumps({"sequences": ["MKT"], **fields}).encode()


JSON_INPUT = ValidatedJSON(pydantic_model=EmbedRequest, max_bytes=LIMIT)
ARRAY_INPUT = ValidatedNdarray(dtype=np.float32, shape=(-1, -1, -1), max_bytes=LIMIT)


@pytest.mark.parametrize("descriptor", [JSON_INPUT, ARRAY_INPUT], ids=["json", "ndarray"])
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"])
def test_a_body_not_sent_as_json_is_a_415_naming_the_content_type(descriptor: Any, content_type: str) -> None:
    error = read(descriptor, b"[[[1.0]]]", {"content-type": content_type})
    assert isinstance(error, UnsupportedMediaType)
    assert error.problems[0].field == "content-type" and repr(content_type) in error.problems[0].message


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON"])
def test_json_with_parameters_or_in_any_case_is_json(content_type: str) -> None:
    assert isinstance(read(JSON_INPUT, embed_body(), {"content-type": content_type}), EmbedRequest)


def test_a_body_without_a_content_type_is_read_as_json() -> None:
    """Clients such as curl -d without -H get the benefit of the doubt: the body is validated all the same."""
    request = http_request("/embed", Body(embed_body()))
    request.scope["headers"] = [header for header in request.scope["headers"] if header[0] != b"content-type"]
    assert isinstance(asyncio.run(JSON_INPUT.from_http_request(request)), EmbedRequest)


@pytest.mark.parametrize("descriptor", [JSON_INPUT, ARRAY_INPUT], ids=["json", "ndarray"])
def test_a_body_declared_over_the_limit_is_a_413_unread(descriptor: Any) -> None:
    body = Body(b"[" * (LIMIT + 1))
    error = asyncio.run(descriptor.from_http_request(http_request("/any", body)))
    assert isinstance(error, PayloadTooLarge) and error.problems[0].field == "body"
    assert f"over the limit of {LIMIT:,} bytes (BIONEMO_MAX_REQUEST_BYTES)" in str(error)
    assert body.received == 0


@pytest.mark.parametrize("descriptor", [JSON_INPUT, ARRAY_INPUT], ids=["json", "ndarray"])
def test_a_chunked_body_over_the_limit_is_a_413_read_no_further_than_the_limit(descriptor: Any) -> None:
    body = Body(b" " * (10 * LIMIT), chunk_size=LIMIT // 4)
    error = asyncio.run(descriptor.from_http_request(http_request("/any", body)))
    assert isinstance(error, PayloadTooLarge)
    assert body.received <= LIMIT + LIMIT // 4  # the chunk that crossed the limit, and nothing after it


def test_a_body_of_exactly_the_limit_is_read_whole_however_it_is_sent() -> None:
    body = embed_body()
    exactly = body + b" " * (LIMIT - len(body))
    assert isinstance(read(JSON_INPUT, exactly), EmbedRequest)
    assert isinstance(read(JSON_INPUT, exactly, chunk_size=7), EmbedRequest)
    assert isinstance(read(JSON_INPUT, exactly + b" "), PayloadTooLarge)


@pytest.mark.parametrize("descriptor", [JSON_INPUT, ARRAY_INPUT], ids=["json", "ndarray"])
@pytest.mark.parametrize("body", [b"{not json", b"", b'{"sequences": ["MKT"]', b"\xff\xfe"])
def test_a_body_that_is_not_json_is_a_400(descriptor: Any, body: bytes) -> None:
    error = read(descriptor, body)
    assert isinstance(error, MalformedBody), error
    assert error.problems[0].field == "body" and error.problems[0].message.startswith("not valid JSON")


@pytest.mark.parametrize(
    ("location", "path"),
    [
        ((), "body"),
        (("sequences",), "sequences"),
        (("sequences", 1), "sequences[1]"),
        (("mask", 0, 2), "mask[0][2]"),
        (("options", "inner", 3), "options.inner[3]"),
    ],
)
def test_a_validation_location_is_written_as_a_field_path(location: tuple[str | int, ...], path: str) -> None:
    assert field_path(location) == path


def test_every_field_at_fault_is_named_with_its_item() -> None:
    error = read(JSON_INPUT, json.dumps({"sequences": ["MKT", 5, "A"], "truncate": "yes", "colour": "red"}).encode())
    assert isinstance(error, InvalidRequest)
    assert sorted(problem.field for problem in error.problems) == ["colour", "sequences[1]", "truncate"]


def test_a_nested_item_is_named_by_every_index() -> None:
    decode = ValidatedJSON(pydantic_model=DecodeRequest, max_bytes=LIMIT)
    error = read(decode, json.dumps({"hiddens": [[[0.5]]], "mask": [[1, 2]]}).encode())
    assert [(p.field, p.message) for p in error.problems] == [("mask[0][1]", "Input should be 0 or 1")]


def test_a_body_that_is_not_an_object_is_a_422_at_body() -> None:
    error = read(JSON_INPUT, b'[["MKT"]]')
    assert isinstance(error, InvalidRequest) and error.problems[0].field == "body"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([[[0.5, 1.0]], [[0.5]]], "not a rectangular array of numbers"),
        ([[["a"]]], "not a rectangular array of numbers"),
        ({"hiddens": [[[0.5]]]}, "not a rectangular array of numbers"),
        ([[0.5, 1.0]], "has 2 dimensions; expected 3"),
        ([[[[0.5]]]], "has 4 dimensions; expected 3"),
        (0.5, "has 0 dimensions; expected 3"),
    ],
)
def test_an_array_body_must_be_rectangular_numbers_of_the_declared_rank(values: Any, message: str) -> None:
    error = read(ARRAY_INPUT, json.dumps(values).encode())
    assert isinstance(error, InvalidRequest) and error.problems[0].field == "body"
    assert error.problems[0].message.startswith(message), error


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_an_array_body_must_be_finite(number: str) -> None:
    """Python's json reads these words, which JSON has not; the array would carry them to the decoder."""
    error = read(ARRAY_INPUT, f"[[[{number}, 0.5]]]".encode())
    assert isinstance(error, InvalidRequest) and "contains NaN or infinite values" in str(error)


def test_an_array_body_comes_back_as_float32_of_its_shape() -> None:
    array = read(ARRAY_INPUT, b"[[[1, 2.5]], [[3, 4]]]")
    assert array.dtype == np.float32 and array.shape == (2, 1, 2)
    np.testing.assert_array_equal(array, [[[1, 2.5]], [[3, 4]]])


def test_a_grpc_json_value_reads_its_whole_numbers_as_integers() -> None:
    """A protobuf Value holds every number as a double; strict integer fields must take 2.0 as 2, as HTTP's 2."""
    value = struct_pb2.Value()
    value.struct_value.update({"sequences": ["MKT"], "model_version": 2})
    parsed = asyncio.run(JSON_INPUT.from_proto(value))
    assert isinstance(parsed, EmbedRequest) and parsed.model_version == 2


ADMIN_INPUT = AdminJSON(pydantic_model=AdminModelRequest, token=TOKEN, max_bytes=LIMIT)


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"],
    ids=["none", "wrong", "other-scheme", "no-scheme", "longer", "prefix"],
)
def test_an_admin_request_without_the_token_is_a_401_before_its_body_is_read(authorization: str | None) -> None:
    body = Body(json.dumps({"model": "esm2nv"}).encode())
    headers = {} if authorization is None else {"authorization": authorization}
    error = asyncio.run(ADMIN_INPUT.from_http_request(http_request("/admin/load", body, headers)))
    assert isinstance(error, Unauthorized) and error.problems[0].field == "authorization"
    assert TOKEN not in str(error)
    assert body.received == 0


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_an_admin_request_with_the_token_is_validated_as_any_other(scheme: str) -> None:
    headers = {"authorization": f"{scheme} {TOKEN}"}
    assert read(ADMIN_INPUT, b'{"model": "esm2nv"}', headers) == AdminModelRequest(model="esm2nv")
    error = read(ADMIN_INPUT, b'{"model": "../esm2nv"}', headers)
    assert isinstance(error, InvalidRequest) and error.problems[0].field == "model"


def render(output: Any, error: ServiceError) -> tuple[int, dict[str, str], dict[str, Any]]:
    response = asyncio.run(output.to_http_response(error))
    return response.status_code, dict(response.headers), json.loads(response.body)


ERRORS = [error_type.at("model", "it went wrong") for error_type in HTTP_STATUS]


@pytest.mark.parametrize("output", [JSONOutput(pydantic_model=EmbedRequest), NdarrayOutput()], ids=["json", "ndarray"])
@pytest.mark.parametrize("error", ERRORS, ids=[type(error).__name__ for error in ERRORS])
def test_every_error_is_answered_with_its_status_headers_and_the_one_error_shape(
    output: Any, error: ServiceError
) -> None:
    status, headers, body = render(output, error)
    assert status == HTTP_STATUS[type(error)]
    assert headers["content-type"] == "application/json"
    for name, value in error_headers(error).items():
        assert headers[name.lower()] == value
    assert body == {
        "error": {
            "type": ERROR_TYPES[type(error)],
            "message": "model: it went wrong",
            "details": [{"field": "model", "message": "it went wrong"}],
        }
    }


@pytest.mark.parametrize(
    ("error", "header", "value"),
    [
        (ModelUnavailable.at("model", "away"), "retry-after", "5"),
        (Overloaded.at("request", "full"), "retry-after", "1"),
        (OverShare.after(4.5, "request", "over its share"), "retry-after", "5"),
        (Unauthorized.at("authorization", "no token"), "www-authenticate", 'Bearer realm="bionemo admin"'),
    ],
)
def test_retryable_and_unauthorized_errors_carry_their_header(error: ServiceError, header: str, value: str) -> None:
    assert render(JSONOutput(pydantic_model=EmbedRequest), error)[1][header] == value


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (InvalidRequest.at("input[1]", "sequence is empty"), 422, "invalid_request_error"),
        (ModelUnavailable.at("model", "away"), 503, "server_error"),
    ],
)
def test_the_openai_front_answers_in_openais_error_shape(error: ServiceError, status: int, kind: str) -> None:
    rendered_status, headers, body = render(OpenAIJSONOutput(pydantic_model=EmbedRequest), error)
    assert rendered_status == status
    assert body == {
        "error": {
            "message": str(error), "type": kind, "param": error.problems[0].field, "code": ERROR_TYPES[type(error)]
        }
    }
    if status == 503:
        assert headers["retry-after"] == "5"
