"""Typed service errors, the one JSON error shape, and the tables from exception to HTTP status and gRPC code.

Every client mistake becomes a 4xx (gRPC: INVALID_ARGUMENT and kin) whose body
(gRPC: details) names the field (and the item index) at fault; Triton being
away is a 503 (UNAVAILABLE). Only a bug is a 500 (INTERNAL).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
import math
from typing import Any, Self

import grpc


@dataclass(frozen=True)
class FieldProblem:
    field: str
    message: str


class ServiceError(Exception):
    """Base of every error the service answers on purpose."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        super().__init__("; ".join(f"{p.field}: {p.message}" for p in problems))
        self.problems = problems

    @classmethod
    def at(cls, field: str, message: str) -> Self:
        return cls([FieldProblem(field, message)])

    def renamed(self, rename: Callable[[str], str]) -> Self:
        """The same error with each field as another front's request names it (`sequences[1]` -> `input[1]`)."""
        return type(self)([FieldProblem(rename(problem.field), problem.message) for problem in self.problems])


class Unauthorized(ServiceError):
    """An admin endpoint called without the admin token (missing or wrong: the answer does not say which)."""


class MalformedBody(ServiceError):
    """The body is not JSON, or not sent as JSON."""


class PayloadTooLarge(ServiceError):
    """The body is over the configured size limit; it is not read past it."""


class UnsupportedMediaType(ServiceError):
    """The request declares a content type other than JSON."""


class InvalidRequest(ServiceError):
    """The JSON does not match the request schema, or an item in it is unusable."""


class UnknownModel(ServiceError):
    """The request names a model this service does not serve."""


class CapabilityNotSupported(ServiceError):
    """The named model cannot do what the endpoint does (e.g. /decode with a protein model)."""


class ModelUnavailable(ServiceError):
    """Triton cannot run the model right now (not ready, restarting, unreachable)."""


class ModelLoadFailed(ServiceError):
    """Triton refused to load a model an admin asked for (its files are broken, say); Triton's reason is given."""


class RetryLater(ServiceError):
    """Refused for now, not for what it asks: the same request may succeed after `retry_after_s` (HTTP's
    `Retry-After`, gRPC's `retry-after` and `retry-after-ms` trailing metadata)."""

    def __init__(self, problems: list[FieldProblem], retry_after_s: float = 1.0) -> None:
        super().__init__(problems)
        self.retry_after_s = retry_after_s

    @classmethod
    def after(cls, retry_after_s: float, field: str, message: str) -> Self:
        return cls([FieldProblem(field, message)], retry_after_s)

    def renamed(self, rename: Callable[[str], str]) -> Self:
        renamed = super().renamed(rename)
        renamed.retry_after_s = self.retry_after_s
        return renamed

    @property
    def retry_after_header(self) -> str:
        """Whole seconds, at least 1: what HTTP's Retry-After takes."""
        return str(max(1, math.ceil(self.retry_after_s)))


class Overloaded(RetryLater):
    """The service cannot finish the request before its deadline, given the work queued ahead of it (or the worker
    is at its bound of requests in flight)."""


class OverShare(RetryLater):
    """The client that sent it already holds more than its share of the service's work while others wait."""


class ClientGone(ServiceError):
    """The client closed the connection (or cancelled the call) before its answer: its work was stopped. Nobody reads
    this answer; it is counted."""


class DeadlineExceeded(ServiceError):
    """The request was not answered within the per-request timeout; its work was cancelled."""


CLIENT_CLOSED_REQUEST = 499
"""nginx's status for a request whose client went away first (no HTTPStatus has it)."""

HTTP_STATUS: dict[type[ServiceError], int] = {
    Unauthorized: HTTPStatus.UNAUTHORIZED,
    MalformedBody: HTTPStatus.BAD_REQUEST,
    PayloadTooLarge: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    UnsupportedMediaType: HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
    InvalidRequest: HTTPStatus.UNPROCESSABLE_ENTITY,
    UnknownModel: HTTPStatus.UNPROCESSABLE_ENTITY,
    CapabilityNotSupported: HTTPStatus.UNPROCESSABLE_ENTITY,
    ModelUnavailable: HTTPStatus.SERVICE_UNAVAILABLE,
    ModelLoadFailed: HTTPStatus.BAD_GATEWAY,
    Overloaded: HTTPStatus.SERVICE_UNAVAILABLE,
    OverShare: HTTPStatus.TOO_MANY_REQUESTS,
    ClientGone: CLIENT_CLOSED_REQUEST,
    DeadlineExceeded: HTTPStatus.GATEWAY_TIMEOUT,
}

GRPC_STATUS: dict[type[ServiceError], grpc.StatusCode] = {
    Unauthorized: grpc.StatusCode.UNAUTHENTICATED,
    MalformedBody: grpc.StatusCode.INVALID_ARGUMENT,
    PayloadTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    UnsupportedMediaType: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    UnknownModel: grpc.StatusCode.INVALID_ARGUMENT,
    CapabilityNotSupported: grpc.StatusCode.INVALID_ARGUMENT,
    ModelUnavailable: grpc.StatusCode.UNAVAILABLE,
    # Triton refused the files an admin asked it to load: not a bug (INTERNAL), not transient (UNAVAILABLE); the
    # repository must be fixed before the same call can succeed.
    ModelLoadFailed: grpc.StatusCode.FAILED_PRECONDITION,
    # Retry after the pushback its trailing metadata gives; a client over its share has exhausted its quota.
    Overloaded: grpc.StatusCode.UNAVAILABLE,
    OverShare: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ClientGone: grpc.StatusCode.CANCELLED,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
}
"""The gRPC code of each error, for every gRPC front (fronts/bentoml/grpc_server.py); the details are `str(error)`."""

ERROR_TYPES: dict[type[ServiceError], str] = {
    Unauthorized: "unauthorized",
    MalformedBody: "malformed_body",
    PayloadTooLarge: "payload_too_large",
    UnsupportedMediaType: "unsupported_media_type",
    InvalidRequest: "invalid_request",
    UnknownModel: "unknown_model",
    CapabilityNotSupported: "capability_not_supported",
    ModelUnavailable: "model_unavailable",
    ModelLoadFailed: "model_load_failed",
    Overloaded: "overloaded",
    OverShare: "over_share",
    ClientGone: "client_gone",
    DeadlineExceeded: "deadline_exceeded",
}

RESPONSE_HEADERS: dict[type[ServiceError], dict[str, str]] = {
    ModelUnavailable: {"Retry-After": "5"},
    Unauthorized: {"WWW-Authenticate": 'Bearer realm="bionemo admin"'},
}
"""`Retry-After` when Triton is away (a restart's time), and the scheme an admin endpoint expects (RFC 6750); a
`RetryLater` carries its own `Retry-After`, computed from the queue."""


def http_status(error: ServiceError) -> int:
    return int(HTTP_STATUS[type(error)])


def grpc_status(error: ServiceError) -> grpc.StatusCode:
    return GRPC_STATUS[type(error)]


def error_headers(error: ServiceError) -> dict[str, str]:
    if isinstance(error, RetryLater):
        return {"Retry-After": error.retry_after_header}
    return RESPONSE_HEADERS.get(type(error), {})


def grpc_trailers(error: ServiceError) -> tuple[tuple[str, str], ...]:
    """The trailing metadata of a gRPC error: a `RetryLater`'s wait as `retry-after` (whole seconds, as HTTP's) and
    `retry-after-ms` (gRPC reserves its own `grpc-retry-pushback-ms` to the library)."""
    if isinstance(error, RetryLater):
        return (("retry-after", error.retry_after_header), ("retry-after-ms", str(round(error.retry_after_s * 1000))))
    return ()


def error_body(error: ServiceError) -> dict[str, Any]:
    """`{"error": {"type", "message", "details": [{"field", "message"}]}}`, the shape of every error."""
    return {
        "error": {
            "type": ERROR_TYPES[type(error)],
            "message": str(error),
            "details": [{"field": p.field, "message": p.message} for p in error.problems],
        }
    }
