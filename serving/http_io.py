"""BentoML IO descriptors and endpoint registration in which every failure is a typed error in one JSON shape.

BentoML's own descriptors answer a body that fails validation with a
plain-text 400 and anything unexpected with a 500. Here the input descriptor
hands a body it cannot use to the endpoint as a `ServiceError`, the endpoint
returns any `ServiceError` instead of raising it, and the output descriptors
render it as its status code and error body, whatever the success type.
Each descriptor keeps the wire format of the BentoML one it extends, and says so
in /docs.json, so that BentoML's own clients can call every API.
"""

from __future__ import annotations

import functools
import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import bentoml
import numpy as np
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from serving.admission import Admission
from serving.errors import (
    FieldProblem,
    InvalidRequest,
    MalformedBody,
    PayloadTooLarge,
    ServiceError,
    Unauthorized,
    UnsupportedMediaType,
    error_body,
    error_headers,
    http_status,
)
from serving.settings import current_settings

RequestT = TypeVar("RequestT")
Handler = Callable[[RequestT], Awaitable[Any]]


def field_path(location: tuple[str | int, ...]) -> str:
    """('sequences', 2) -> 'sequences[2]'; the empty location is the whole body."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path or "body"


def _validation_error(error: ValidationError) -> ServiceError:
    if any(item["type"] == "json_invalid" for item in error.errors()):
        return MalformedBody.at("body", f"not valid JSON: {error.errors()[0]['msg']}")
    return InvalidRequest([FieldProblem(field_path(tuple(item["loc"])), item["msg"]) for item in error.errors()])


def _media_type_error(request: Request) -> ServiceError | None:
    media_type = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if media_type != "application/json":
        return UnsupportedMediaType.at("content-type", f"{media_type!r} is not accepted; send application/json")
    return None


async def _body(request: Request) -> bytes | ServiceError:
    """The body, or a 413 as soon as it is known to be over the limit: from Content-Length, or while reading a
    chunked one; nothing past the limit is read into memory."""
    limit = current_settings().max_request_bytes
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


class _PublishesBentoMLSpec:
    """Mixin for every descriptor here: its `x-bentoml-io-descriptor` in /docs.json is that of the BentoML descriptor
    it extends, whose wire format it keeps.

    `bentoml.client.Client.from_url` builds one method per API from these specs; a subclass has no registered id of
    its own (BentoML allows one class per id), so without this its spec says `"id": null` and the client skips the
    API ("No IO descriptor spec found").
    """

    def to_spec(self) -> dict[str, Any]:
        spec = super().to_spec()  # type: ignore[misc]
        spec["id"] = next(
            vars(base)["descriptor_id"]
            for base in type(self).__mro__
            if isinstance(vars(base).get("descriptor_id"), str)
        )
        return spec


class ValidatedJSON(_PublishesBentoMLSpec, bentoml.io.JSON):
    """A pydantic-typed JSON input that yields either the parsed request or the `ServiceError` explaining why not."""

    async def from_http_request(self, request: Request) -> BaseModel | ServiceError:
        if error := _media_type_error(request):
            return error
        body = await _body(request)
        if isinstance(body, ServiceError):
            return body
        try:
            return self._pydantic_model.model_validate_json(body)
        except ValidationError as error:
            return _validation_error(error)


class ValidatedNdarray(_PublishesBentoMLSpec, bentoml.io.NumpyNdarray):
    """A JSON array of numbers, rectangular, finite and of the declared rank; or the `ServiceError` saying why not."""

    async def from_http_request(self, request: Request) -> np.ndarray | ServiceError:
        if error := _media_type_error(request):
            return error
        body = await _body(request)
        if isinstance(body, ServiceError):
            return body
        try:
            values = json.loads(body)
        except ValueError as error:
            return MalformedBody.at("body", f"not valid JSON: {error}")
        try:
            array = np.asarray(values, dtype=self._dtype)
        except (ValueError, TypeError):
            return InvalidRequest.at("body", "not a rectangular array of numbers (rows of different lengths?)")
        if self._shape is not None and array.ndim != len(self._shape):
            return InvalidRequest.at("body", f"has {array.ndim} dimensions; expected {len(self._shape)}")
        if not np.isfinite(array).all():
            return InvalidRequest.at("body", "contains NaN or infinite values")
        return array


class NoInput(_PublishesBentoMLSpec, bentoml.io.JSON):
    """For endpoints that take nothing: answers GET (and POST, which the OpenAPI document shows)."""

    HTTP_METHODS = ("GET", "POST")

    async def from_http_request(self, request: Request) -> None:
        return None


def _carries_admin_token(request: Request) -> bool:
    expected = current_settings().admin_token
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return (
        expected is not None
        and scheme.lower() == "bearer"
        and hmac.compare_digest(credentials.strip().encode(), expected.encode())  # in constant time
    )


class _AdminOnly:
    """Mixin for the admin endpoints' input descriptors: without the admin token a 401, before the body is read."""

    async def from_http_request(self, request: Request) -> Any:
        if not _carries_admin_token(request):
            return Unauthorized.at(
                "authorization", "admin endpoints need the header `Authorization: Bearer <BIONEMO_ADMIN_TOKEN>`"
            )
        return await super().from_http_request(request)  # type: ignore[misc]


class AdminJSON(_AdminOnly, ValidatedJSON):
    pass


class AdminNoInput(_AdminOnly, NoInput):
    pass


class _RendersErrors:
    """Mixin for output descriptors: a `ServiceError` becomes its status and JSON error body."""

    async def to_http_response(self, obj: Any, ctx: bentoml.Context | None = None) -> Response:
        if isinstance(obj, ServiceError):
            return JSONResponse(error_body(obj), status_code=http_status(obj), headers=error_headers(obj))
        return await super().to_http_response(obj, ctx)  # type: ignore[misc]


class JSONOutput(_PublishesBentoMLSpec, _RendersErrors, bentoml.io.JSON):
    """A pydantic answer serialised by pydantic itself (Rust), not BentoML's `model_dump` + `json.dumps`.

    The same values (exponents written e-6, not e-06) in 15 instead of 114 us for one 320-float embedding,
    71 instead of 389 ms for /hidden of 8 x 400 residues. A NaN would be written as null instead of failing
    the request with a 500.
    """

    async def to_http_response(self, obj: Any, ctx: bentoml.Context | None = None) -> Response:
        if isinstance(obj, BaseModel) and ctx is None:
            return Response(obj.model_dump_json(), media_type=self._mime_type)
        return await super().to_http_response(obj, ctx)


class NdarrayOutput(_PublishesBentoMLSpec, _RendersErrors, bentoml.io.NumpyNdarray):
    pass


class Endpoints:
    """Registers handlers on `service`, each run under `admission`; any `ServiceError` is answered as JSON."""

    def __init__(self, service: bentoml.legacy.Service, admission: Admission) -> None:
        self.service, self.admission = service, admission

    def __call__(
        self, route: str, input: bentoml.io.IODescriptor, output: bentoml.io.IODescriptor
    ) -> Callable[[Handler], Handler]:
        """Register `handler(request) -> response` at `route`."""

        def register(handler: Handler) -> Handler:
            @functools.wraps(handler)
            async def answer(parsed: Any) -> Any:
                if isinstance(parsed, ServiceError):
                    return parsed
                try:
                    return await self.admission.run(handler(parsed))
                except ServiceError as error:
                    return error

            del answer.__wrapped__  # BentoML inspects the signature: it must be (parsed)
            self.service.api(input=input, output=output, route=route, doc=handler.__doc__)(answer)
            return handler

        return register
