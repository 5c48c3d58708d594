"""BentoML IO descriptors in which every failure is a typed error in one JSON shape.

BentoML's own descriptors answer a body that fails validation with a
plain-text 400 and anything unexpected with a 500. Here the input descriptor
hands a body it cannot use to the endpoint as a `ServiceError`, the endpoint
(fronts/bentoml/endpoints.py) returns any `ServiceError` instead of raising it, and the output descriptors
render it as its status code and error body, whatever the success type.
Each descriptor keeps the wire format of the BentoML one it extends, and says so
in /docs.json, so that BentoML's own clients can call every API.

The same descriptors serve `bentoml serve-grpc`'s `BentoService/Call`: `from_proto` reads the request's `json`
(or `serialized_bytes`, JSON text) and `ndarray` fields through the same validation as an HTTP body, and
`to_proto` answers a `ServiceError` with its gRPC code (bionemo_serving/fronts/bentoml/grpc_server.py). The admin
endpoints' descriptors are admin.py's, the DataFrame ones bionemo_serving/fronts/dataframe/tables.py's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import bentoml
import numpy as np
from bentoml.exceptions import BentoMLException
from google.protobuf import json_format, struct_pb2
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bionemo_serving.errors import (
    FieldProblem,
    InvalidRequest,
    MalformedBody,
    PayloadTooLarge,
    ServiceError,
    UnsupportedMediaType,
    error_body,
    error_headers,
    http_status,
)
from bionemo_serving.fronts.bentoml.grpc_server import GrpcErrorReply
from bionemo_serving.fronts.bentoml.proto_values import to_value

def field_path(location: tuple[str | int, ...]) -> str:
    """('sequences', 2) -> 'sequences[2]'; the empty location is the whole body."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path or "body"


def validation_error(error: ValidationError) -> ServiceError:
    """A request that fails its pydantic model, as the `ServiceError` naming each field at fault."""
    if any(item["type"] == "json_invalid" for item in error.errors()):
        return MalformedBody.at("body", f"not valid JSON: {error.errors()[0]['msg']}")
    return InvalidRequest([FieldProblem(field_path(tuple(item["loc"])), item["msg"]) for item in error.errors()])


def _media_type_error(request: Request) -> ServiceError | None:
    media_type = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if media_type != "application/json":
        return UnsupportedMediaType.at("content-type", f"{media_type!r} is not accepted; send application/json")
    return None


async def read_body(request: Request, limit: int) -> bytes | ServiceError:
    """The body, or a 413 as soon as it is known to be over `limit` bytes: from Content-Length, or while reading a
    chunked one; nothing past the limit is read into memory."""
    too_large = PayloadTooLarge.at("body", f"is over the limit of {limit:,} bytes (BIONEMO_MAX_REQUEST_BYTES)")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return too_large
        chunks.append(chunk)
    return b"".join(chunks)


class PublishesBentoMLSpec:
    """Mixin for every descriptor here: its `x-bentoml-io-descriptor` in /docs.json is that of the BentoML descriptor
    it extends, whose wire format it keeps.

    `bentoml.client.Client.from_url` builds one method per API from these specs; a subclass has no registered id of
    its own (BentoML allows one class per id), so without this its spec says `"id": null` and the client skips the
    API ("No IO descriptor spec found"). Likewise BentoML gives every subclass no gRPC fields (BentoService/Call
    then refuses the request's `json` or `ndarray`): each keeps those of the descriptor it extends.
    """

    def __init_subclass__(cls, **options: Any) -> None:
        super().__init_subclass__(**options)
        if not options.get("proto_fields"):
            cls.proto_fields = next(vars(base)["proto_fields"] for base in cls.__mro__[1:] if vars(base).get("proto_fields"))

    def to_spec(self) -> dict[str, Any]:
        spec = super().to_spec()  # type: ignore[misc]
        spec["id"] = next(
            vars(base)["descriptor_id"]
            for base in type(self).__mro__
            if isinstance(vars(base).get("descriptor_id"), str)
        )
        return spec


class ReadsBody:
    """Mixin for the input descriptors that read a body: one over `max_bytes` (BIONEMO_MAX_REQUEST_BYTES, handed in at
    start-up) is a 413."""

    def __init__(self, *, max_bytes: int, **options: Any) -> None:
        super().__init__(**options)
        self.max_bytes = max_bytes


def _integral_numbers(value: Any) -> Any:
    """A `google.protobuf.Value` holds every number as a double: 10 arrives as 10.0. JSON text of the same numbers
    writes the integral ones as integers, so that strict integer fields accept them, as they do over HTTP."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, list):
        return [_integral_numbers(item) for item in value]
    if isinstance(value, dict):
        return {key: _integral_numbers(item) for key, item in value.items()}
    return value


def _proto_json(field: struct_pb2.Value | bytes) -> bytes:
    """The JSON text of a gRPC request's `json` (a protobuf Value) or `serialized_bytes` field."""
    if isinstance(field, bytes):
        return field
    return json.dumps(_integral_numbers(json_format.MessageToDict(field)), allow_nan=False).encode()


class ValidatedJSON(PublishesBentoMLSpec, ReadsBody, bentoml.io.JSON):
    """A pydantic-typed JSON input that yields either the parsed request or the `ServiceError` explaining why not."""

    async def from_http_request(self, request: Request) -> BaseModel | ServiceError:
        if error := _media_type_error(request):
            return error
        body = await read_body(request, self.max_bytes)
        if isinstance(body, ServiceError):
            return body
        return self.validated(body)

    async def from_proto(self, field: struct_pb2.Value | bytes) -> BaseModel | ServiceError:
        try:
            return self.validated(_proto_json(field))
        except ValueError as error:  # NaN or infinity: not JSON
            return InvalidRequest.at("body", f"not valid JSON: {error}")

    def validated(self, body: bytes) -> BaseModel | ServiceError:
        """The request the JSON text `body` describes, or the `ServiceError` naming each field at fault."""
        try:
            return self._pydantic_model.model_validate_json(body)
        except ValidationError as error:
            return validation_error(error)


class ValidatedNdarray(PublishesBentoMLSpec, ReadsBody, bentoml.io.NumpyNdarray):
    """A JSON array of numbers, rectangular, finite and of the declared rank; or the `ServiceError` saying why not."""

    async def from_http_request(self, request: Request) -> np.ndarray | ServiceError:
        if error := _media_type_error(request):
            return error
        body = await read_body(request, self.max_bytes)
        if isinstance(body, ServiceError):
            return body
        try:
            values = json.loads(body)
        except ValueError as error:
            return MalformedBody.at("body", f"not valid JSON: {error}")
        return self.validated(values)

    async def from_proto(self, field: Any) -> np.ndarray | ServiceError:
        try:
            values = await super().from_proto(field)
        except BentoMLException as error:
            return InvalidRequest.at("body", error.message)
        return self.validated(values)

    def validated(self, values: Any) -> np.ndarray | ServiceError:
        """`values` as an array of the declared dtype and rank, all finite; or the `ServiceError` saying why not."""
        try:
            array = np.asarray(values, dtype=self._dtype)
        except (ValueError, TypeError):
            return InvalidRequest.at("body", "not a rectangular array of numbers (rows of different lengths?)")
        if self._shape is not None and array.ndim != len(self._shape):
            return InvalidRequest.at("body", f"has {array.ndim} dimensions; expected {len(self._shape)}")
        if not np.isfinite(array).all():
            return InvalidRequest.at("body", "contains NaN or infinite values")
        return array


class NoInput(PublishesBentoMLSpec, bentoml.io.JSON):
    """For endpoints that take nothing: answers GET (and POST, which the OpenAPI document shows)."""

    HTTP_METHODS = ("GET", "POST")

    async def from_http_request(self, request: Request) -> None:
        return None

    async def from_proto(self, field: Any) -> None:
        return None


class RendersErrors:
    """Mixin for output descriptors: a `ServiceError` becomes its status and JSON error body.

    `error_shape` writes the body: the service's own shape, or another API dialect's (fronts/openai/routes.py);
    the status is always the one of bionemo_serving/errors.py.
    """

    error_shape: Callable[[ServiceError], dict[str, Any]] = staticmethod(error_body)

    async def to_http_response(self, obj: Any, ctx: bentoml.Context | None = None) -> Response:
        if isinstance(obj, ServiceError):
            return JSONResponse(self.error_shape(obj), status_code=http_status(obj), headers=error_headers(obj))
        return await super().to_http_response(obj, ctx)  # type: ignore[misc]

    async def to_proto(self, obj: Any) -> Any:
        if isinstance(obj, ServiceError):
            raise GrpcErrorReply(obj)
        return await super().to_proto(obj)  # type: ignore[misc]


class JSONOutput(PublishesBentoMLSpec, RendersErrors, bentoml.io.JSON):
    """A pydantic answer serialised by pydantic itself (Rust), not BentoML's `model_dump` + `json.dumps`.

    The same values (exponents written e-6, not e-06) in 15 instead of 114 us for one 320-float embedding,
    71 instead of 389 ms for /hidden of 8 x 400 residues. A NaN would be written as null instead of failing
    the request with a 500.
    """

    async def to_http_response(self, obj: Any, ctx: bentoml.Context | None = None) -> Response:
        if isinstance(obj, BaseModel) and ctx is None:
            return Response(obj.model_dump_json(), media_type=self._mime_type)
        return await super().to_http_response(obj, ctx)

    async def to_proto(self, obj: Any) -> Any:
        """The answer's JSON (enums as their values, as over HTTP) as a protobuf Value (proto_values.py)."""
        if isinstance(obj, BaseModel):
            return to_value(obj.model_dump(mode="json"))
        return await super().to_proto(obj)


class NdarrayOutput(PublishesBentoMLSpec, RendersErrors, bentoml.io.NumpyNdarray):
    pass
