"""The admin endpoints' input descriptors: a request without `Authorization: Bearer <BIONEMO_ADMIN_TOKEN>` (HTTP
header or gRPC metadata) is a 401 before its body is read, compared in constant time."""

from __future__ import annotations

import hmac
from typing import Any

from starlette.requests import Request

from bionemo_serving.errors import Unauthorized
from bionemo_serving.fronts.bentoml.descriptors import NoInput, ValidatedJSON
from bionemo_serving.fronts.bentoml.grpc_server import invocation_metadata


def _carries_token(authorization: str, expected: str) -> bool:
    """`authorization` (the HTTP header, or the gRPC metadata of that name) is `Bearer <expected>`."""
    scheme, _, credentials = authorization.partition(" ")
    # in constant time
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), expected.encode())


_NO_ADMIN_TOKEN = Unauthorized.at(
    "authorization", "admin endpoints need `Authorization: Bearer <BIONEMO_ADMIN_TOKEN>` (HTTP header or gRPC metadata)"
)


class _AdminOnly:
    """Mixin for the admin endpoints' input descriptors: without the admin token (BIONEMO_ADMIN_TOKEN, handed in at
    start-up) a 401, before the body is read."""

    def __init__(self, *, token: str, **options: Any) -> None:
        super().__init__(**options)
        self.token = token

    async def from_http_request(self, request: Request) -> Any:
        if not _carries_token(request.headers.get("authorization", ""), self.token):
            return _NO_ADMIN_TOKEN
        return await super().from_http_request(request)  # type: ignore[misc]

    async def from_proto(self, field: Any) -> Any:
        if not _carries_token(invocation_metadata().get("authorization", ""), self.token):
            return _NO_ADMIN_TOKEN
        return await super().from_proto(field)  # type: ignore[misc]


class AdminJSON(_AdminOnly, ValidatedJSON):
    pass


class AdminNoInput(_AdminOnly, NoInput):
    pass
