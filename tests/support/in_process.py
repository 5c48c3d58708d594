"""The engine, and the service's routes, run in this process over a FakeRunner: no bentoml serve, no tritonserver.

`engine_over` builds the engine as service.py does, with the service's default limits unless told others.
`InProcessService` mounts each front as service.py mounts it (the same `Endpoints`, admission, registry, engine and
limits) on a stand-in for the BentoML service that keeps each route's descriptors and handler. A request goes the way
BentoML hands it on: the input descriptor's `from_http_request` (media type, size, validation), the endpoint
(admission, a `ServiceError` answered), and the output descriptor's `to_http_response` (status, headers, body).
`assert_rejected` holds an answer to the service's one error shape.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from bentoml.io import IODescriptor
from starlette.requests import Request

from bionemo_serving.engine.engine import Engine
from bionemo_serving.engine.limits import RequestLimits
from bionemo_serving.engine.scheduler import Scheduler
from bionemo_serving.errors import ERROR_TYPES, HTTP_STATUS
from bionemo_serving.fronts.admission import Admission
from bionemo_serving.fronts.bentoml.endpoints import Endpoints
from bionemo_serving.fronts.dataframe import routes as dataframe_api
from bionemo_serving.fronts.molmim import routes as molmim_api
from bionemo_serving.fronts.native import routes as native_api
from bionemo_serving.fronts.openai import routes as openai_api
from bionemo_serving.startup.settings import (
    MAX_BODY,
    MAX_IN_FLIGHT,
    MAX_RUNNING,
    MAX_SCORE_PASSES,
    MAX_SEQUENCES,
    REQUEST_TIMEOUT,
)
from bionemo_serving.triton.registry import ModelRegistry
from support.fake_runner import FakeRunner


_ANSWERING: ContextVar[Request] = ContextVar("answering")
STATUS_OF_TYPE = {name: int(HTTP_STATUS[error]) for error, name in ERROR_TYPES.items()}
"""Each error type's HTTP status (bionemo_serving/errors.py's table): what an error's `type` must agree with."""


@dataclass(frozen=True)
class Route:
    input: IODescriptor
    output: IODescriptor
    answer: Callable[[Any], Awaitable[Any]]


class RecordingService:
    """What `Endpoints` asks of `bentoml.legacy.Service`: `api(...)`, which here keeps each route."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}

    def api(self, *, input: IODescriptor, output: IODescriptor, route: str, doc: str | None) -> Callable:
        def register(answer: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
            self.routes[route] = Route(input, output, answer)
            return answer

        return register


@dataclass
class Body:
    """A request body as the server receives it: in one piece with its Content-Length, or chunked (no length)."""

    data: bytes
    chunk_size: int | None = None
    received: int = field(default=0, init=False)
    """Bytes the server has read of it so far."""

    def receive(self) -> Callable[[], Awaitable[dict[str, Any]]]:
        chunks = [self.data] if self.chunk_size is None else [
            self.data[start : start + self.chunk_size] for start in range(0, len(self.data), self.chunk_size)
        ]  # fmt: skip

        async def receive() -> dict[str, Any]:
            chunk = chunks.pop(0) if chunks else b""
            self.received += len(chunk)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

        return receive


def http_request(path: str, body: Body, headers: dict[str, str] | None = None) -> Request:
    """A starlette Request as uvicorn hands BentoML one: POST `path`, JSON unless `headers` say otherwise."""
    sent = {"content-type": "application/json"} | (headers or {})
    if body.chunk_size is None:
        sent.setdefault("content-length", str(len(body.data)))
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "query_string": b"",
        "headers": [(name.lower().encode(), value.encode()) for name, value in sent.items()],
    }
    return Request(scope, body.receive())


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> dict[str, Any]:
        """The service's error: {"type", "message", "details": [{"field", "message"}]}."""
        return self.json()["error"]


def assert_rejected(answer: Answer, status: int, field: str, message: str) -> dict[str, Any]:
    """`answer` is a `status` whose error names `field` with `message` in its reason; the error, to check further."""
    assert answer.status == status, answer.body
    error = answer.error
    assert STATUS_OF_TYPE[error["type"]] == status  # the status is its type's, bionemo_serving/errors.py's table
    assert error["message"] == "; ".join(f"{d['field']}: {d['message']}" for d in error["details"])
    assert any(d["field"] == field and message in d["message"] for d in error["details"]), error
    return error


def engine_over(
    runner: FakeRunner,
    max_sequences: int = int(MAX_SEQUENCES.default),
    max_score_passes: int = int(MAX_SCORE_PASSES.default),
    request_seconds: float | None = None,
    max_request_bytes: int = int(MAX_BODY.default),
) -> Engine:
    """An Engine (and its registry) over `runner`, as service.py builds it."""
    limits = RequestLimits(max_sequences, max_score_passes, max_request_bytes, request_seconds)
    scheduler = Scheduler(int(MAX_RUNNING.default), float(REQUEST_TIMEOUT.default))
    return Engine(runner, ModelRegistry(runner), limits, scheduler)


class InProcessService:
    """The native, OpenAI, MolMIM, DataFrame (and, with an admin token, admin) routes over an Engine on `runner`, with
    the service's default limits unless told others."""

    def __init__(
        self,
        runner: FakeRunner | None = None,
        *,
        max_sequences: int = int(MAX_SEQUENCES.default),
        max_score_passes: int = int(MAX_SCORE_PASSES.default),
        max_request_bytes: int = int(MAX_BODY.default),
        admin_token: str | None = None,
    ) -> None:
        self.runner = runner or FakeRunner()
        self.engine = engine_over(self.runner, max_sequences, max_score_passes, max_request_bytes=max_request_bytes)
        self.registry = self.engine.encoder.registry
        service = RecordingService()
        admission = Admission(int(MAX_IN_FLIGHT.default), float(REQUEST_TIMEOUT.default), http_request=_ANSWERING.get)
        endpoint = Endpoints(service, admission)
        native_api.mount(endpoint, self.engine, self.registry, max_request_bytes)
        openai_api.mount(endpoint, self.engine, self.registry, max_request_bytes)
        molmim_api.mount(endpoint, self.engine, max_request_bytes)
        dataframe_api.mount(endpoint, self.engine, max_request_bytes)
        if admin_token is not None:
            native_api.mount_admin(endpoint, self.registry, self.engine.limits, admin_token)
        self.routes = service.routes

    async def call(
        self, path: str, body: Any, headers: dict[str, str] | None = None, chunk_size: int | None = None
    ) -> Answer:
        """POST `body` (bytes as they are, anything else as its JSON) to `path`."""
        route = self.routes[path]
        sent = Body(body if isinstance(body, bytes) else json.dumps(body).encode(), chunk_size)
        request = http_request(path, sent, headers)
        _ANSWERING.set(request)  # as BentoML's service context holds the request being answered
        parsed = await route.input.from_http_request(request)
        response = await route.output.to_http_response(await route.answer(parsed))
        return Answer(response.status_code, dict(response.headers), bytes(response.body))

    def post(
        self, path: str, body: Any, headers: dict[str, str] | None = None, chunk_size: int | None = None
    ) -> Answer:
        return asyncio.run(self.call(path, body, headers, chunk_size))
