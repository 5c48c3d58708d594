"""The one table per protocol: every typed error has an HTTP status and a gRPC code."""

from __future__ import annotations

from http import HTTPStatus

import grpc

from bionemo_serving.errors import (
    GRPC_STATUS,
    HTTP_STATUS,
    ModelUnavailable,
    Overloaded,
    OverShare,
    PayloadTooLarge,
    RetryLater,
    ServiceError,
    error_headers,
    grpc_status,
    grpc_trailers,
)


def descendants(error_type: type[ServiceError]) -> set[type[ServiceError]]:
    return {kind for child in error_type.__subclasses__() for kind in {child, *descendants(child)}}


def test_every_error_has_an_http_status_and_a_grpc_code() -> None:
    assert descendants(ServiceError) - {RetryLater} == set(HTTP_STATUS) == set(GRPC_STATUS)


def test_a_refusal_to_retry_later_carries_its_wait_in_both_protocols() -> None:
    refused = OverShare.after(2.2, "request", "over its share")
    assert error_headers(refused) == {"Retry-After": "3"}
    assert dict(grpc_trailers(refused)) == {"retry-after": "3", "retry-after-ms": "2200"}
    assert error_headers(Overloaded.after(0.01, "request", "full")) == {"Retry-After": "1"}  # whole seconds, >= 1
    renamed = refused.renamed(lambda field: f"input.{field}")
    assert renamed.retry_after_s == 2.2 and renamed.problems[0].field == "input.request"
    assert grpc_trailers(ModelUnavailable.at("model", "away")) == ()


def test_client_errors_are_invalid_argument_and_retryable_ones_keep_their_difference() -> None:
    for error, status in HTTP_STATUS.items():
        if status in (HTTPStatus.BAD_REQUEST, HTTPStatus.UNSUPPORTED_MEDIA_TYPE, HTTPStatus.UNPROCESSABLE_ENTITY):
            assert GRPC_STATUS[error] is grpc.StatusCode.INVALID_ARGUMENT, error
    # 503 and 429: retry after the pushback the trailers give; a client over its share has exhausted its quota.
    assert grpc_status(Overloaded.at("request", "full")) is grpc.StatusCode.UNAVAILABLE
    assert grpc_status(OverShare.at("request", "over")) is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert grpc_status(ModelUnavailable.at("model", "away")) is grpc.StatusCode.UNAVAILABLE
    assert grpc_status(PayloadTooLarge.at("body", "large")) is grpc.StatusCode.RESOURCE_EXHAUSTED
