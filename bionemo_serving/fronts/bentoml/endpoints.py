"""Endpoint registration on BentoML's legacy service: every API answered under admission, counted, and any
`ServiceError` handed to the output descriptor (bionemo_serving/fronts/bentoml/descriptors.py) to render."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import bentoml

from bionemo_serving.errors import ServiceError
from bionemo_serving.fronts.admission import Admission
from bionemo_serving.metrics import counted, model_label

RequestT = TypeVar("RequestT")
Handler = Callable[[RequestT], Awaitable[Any]]


class Endpoints:
    """Registers handlers on `service`, each run under `admission`; any `ServiceError` is answered as JSON.

    Every answer is counted here (bionemo_serving/metrics.py): by route, model and status, with its duration.
    """

    def __init__(self, service: bentoml.legacy.Service, admission: Admission) -> None:
        self.service, self.admission = service, admission

    def __call__(
        self, route: str, input: bentoml.io.IODescriptor, output: bentoml.io.IODescriptor, model: str = ""
    ) -> Callable[[Handler], Handler]:
        """Register `handler(request) -> response` at `route`; `model` labels the metrics of requests that name none."""

        def register(handler: Handler) -> Handler:
            @functools.wraps(handler)
            async def answer(parsed: Any) -> Any:
                try:
                    with counted(route, model_label(parsed, model)):
                        if isinstance(parsed, ServiceError):
                            raise parsed
                        return await self.admission.run(handler(parsed))
                except ServiceError as error:  # any other exception is a bug: BentoML answers it with a 500
                    return error

            del answer.__wrapped__  # BentoML inspects the signature: it must be (parsed)
            self.service.api(input=input, output=output, route=route, doc=handler.__doc__)(answer)
            return handler

        return register
