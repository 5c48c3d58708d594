"""The one table per protocol: every typed error has an HTTP status and a gRPC code."""

from __future__ import annotations

from http import HTTPStatus

import grpc

from serving.errors import (
    GRPC_STATUS,
    HTTP_STATUS,
    ModelUnavailable,
    Overloaded,
    PayloadTooLarge,
    ServiceError,
    grpc_status,
)


def test_every_error_has_an_http_status_and_a_grpc_code() -> None:
    assert set(ServiceError.__subclasses__()) == set(HTTP_STATUS) == set(GRPC_STATUS)


def test_client_errors_are_invalid_argument_and_retryable_ones_keep_their_difference() -> None:
    for error, status in HTTP_STATUS.items():
        if status in (HTTPStatus.BAD_REQUEST, HTTPStatus.UNSUPPORTED_MEDIA_TYPE, HTTPStatus.UNPROCESSABLE_ENTITY):
            assert GRPC_STATUS[error] is grpc.StatusCode.INVALID_ARGUMENT, error
    # Both are 503 over HTTP: a full worker (retry soon) is not a Triton that is away.
    assert grpc_status(Overloaded.at("request", "full")) is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert grpc_status(ModelUnavailable.at("model", "away")) is grpc.StatusCode.UNAVAILABLE
    assert grpc_status(PayloadTooLarge.at("body", "large")) is grpc.StatusCode.RESOURCE_EXHAUSTED
