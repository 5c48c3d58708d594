"""What every gRPC front of `bentoml serve-grpc` shares: typed errors as gRPC statuses, and the call's metadata.

BentoML's `BentoService/Call` catches every `Exception` an API raises and answers INTERNAL (or a code it derives
from an HTTP status, which cannot tell 503 overload from 503 Triton away). So the IO descriptors (descriptors.py)
raise a `ServiceError` wrapped in `GrpcErrorReply`, a `BaseException` that passes through BentoML's servicer, and
`ServiceErrorInterceptor` answers it with the code `bionemo_serving.errors.GRPC_STATUS` gives. The BioNeMo servicers
(bionemo_serving/fronts/bionemo_grpc/) raise `ServiceError` itself. Either way the details are the same text as the HTTP
error's message: the field and the item at fault.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import grpc
import uvloop

from bionemo_serving.errors import ServiceError, grpc_status, grpc_trailers

_current_call: ContextVar[grpc.aio.ServicerContext] = ContextVar("bionemo_grpc_call")


def serve_on_uvloop() -> None:
    """Give BentoML's gRPC worker a uvloop event loop, as uvicorn gives the HTTP workers: it serves on whatever
    `asyncio.get_event_loop()` answers once it has imported the service, asyncio's own selector loop by default, on
    which the inference calls' socket writes and reads alone took a tenth of the worker's CPU. Call at the import of
    service.py; an HTTP worker's loop is running by then, and is left as it is."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop running: the gRPC worker, before its server starts
        asyncio.set_event_loop(uvloop.new_event_loop())


class GrpcErrorReply(BaseException):
    """A `ServiceError` on its way out of BentoML's servicer to `ServiceErrorInterceptor`, which answers it."""

    def __init__(self, error: ServiceError) -> None:
        super().__init__(str(error))
        self.error = error


def current_call() -> grpc.aio.ServicerContext | None:
    """The gRPC call being answered; None outside one (an HTTP request)."""
    return _current_call.get(None)


def invocation_metadata() -> dict[str, str]:
    """The metadata of the gRPC call being answered, keys in lower case (as gRPC sends them)."""
    metadata = _current_call.get().invocation_metadata() or ()
    return {key.lower(): value for key, value in metadata if isinstance(value, str)}  # `-bin` keys hold bytes


async def _abort(context: grpc.aio.ServicerContext, error: ServiceError) -> None:
    """End the call with `error`'s code and message, and its trailing metadata (when to retry)."""
    if trailers := grpc_trailers(error):
        context.set_trailing_metadata(trailers)
    await context.abort(grpc_status(error), str(error))


class ServiceErrorInterceptor(grpc.aio.ServerInterceptor):
    """Around every unary call: records the call for `invocation_metadata` and admission (its deadline, its client),
    and answers a `ServiceError` (bare, or wrapped in `GrpcErrorReply`) with its gRPC code, message and trailers."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        behavior = handler.unary_unary

        async def answer(request: Any, context: grpc.aio.ServicerContext) -> Any:
            token = _current_call.set(context)
            try:
                return await behavior(request, context)
            except GrpcErrorReply as reply:
                await _abort(context, reply.error)
            except ServiceError as error:
                await _abort(context, error)
            finally:
                _current_call.reset(token)

        return grpc.unary_unary_rpc_method_handler(
            answer, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
