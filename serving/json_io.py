"""JSON endpoints whose every failure is a typed error in one JSON shape.

BentoML's JSON descriptor answers a body that fails validation with a
plain-text 400 and anything unexpected with a 500. Here the descriptor hands
a body it cannot use to the endpoint as a `ServiceError`, and the endpoint
wrapper turns every `ServiceError` into its status code and error body.
"""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable, TypeVar

import bentoml
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from serving.errors import (
    FieldProblem,
    InvalidRequest,
    MalformedBody,
    ServiceError,
    UnsupportedMediaType,
    error_body,
    http_status,
)

RequestT = TypeVar("RequestT", bound=BaseModel)


def field_path(location: tuple[str | int, ...]) -> str:
    """('sequences', 2) -> 'sequences[2]'; the empty location is the whole body."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path or "body"


def _validation_error(error: ValidationError) -> ServiceError:
    problems = [FieldProblem(field_path(tuple(item["loc"])), item["msg"]) for item in error.errors()]
    if any(item["type"] == "json_invalid" for item in error.errors()):
        return MalformedBody.at("body", f"not valid JSON: {error.errors()[0]['msg']}")
    return InvalidRequest(problems)


class ValidatedJSON(bentoml.io.JSON):
    """A pydantic-typed JSON input that yields either the parsed request or the `ServiceError` explaining why not."""

    async def from_http_request(self, request: Request) -> BaseModel | ServiceError:
        media_type = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if media_type != "application/json":
            return UnsupportedMediaType.at("content-type", f"{media_type!r} is not accepted; send application/json")
        try:
            return self._pydantic_model.model_validate_json(await request.body())
        except ValidationError as error:
            return _validation_error(error)


def json_endpoint(
    service: bentoml.legacy.Service,
    route: str,
    request_type: type[RequestT],
    response_type: type[BaseModel],
) -> Callable[[Callable[[RequestT], Awaitable[BaseModel]]], Callable[[RequestT], Awaitable[BaseModel]]]:
    """Register `handler(request) -> response` at `route`, answering `ServiceError`s as JSON errors."""

    def register(handler: Callable[[RequestT], Awaitable[BaseModel]]) -> Callable[[RequestT], Awaitable[BaseModel]]:
        @functools.wraps(handler)
        async def endpoint(parsed: Any, ctx: bentoml.Context) -> Any:
            try:
                if isinstance(parsed, ServiceError):
                    raise parsed
                return await handler(parsed)
            except ServiceError as error:
                ctx.response.status_code = http_status(error)
                return error_body(error)

        del endpoint.__wrapped__  # BentoML inspects the signature: it must be (parsed, ctx)
        service.api(
            input=ValidatedJSON(pydantic_model=request_type),
            output=bentoml.io.JSON(pydantic_model=response_type),
            route=route,
            doc=handler.__doc__,
        )(endpoint)
        return handler

    return register
