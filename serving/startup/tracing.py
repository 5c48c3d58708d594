"""Request spans only where someone collects them.

BentoML makes a server span for every request, in its HTTP middleware and in
its gRPC server's interceptor, and with no tracing exporter configured
(BentoML's default) nothing ever reads them: 0.5 ms of an API worker's CPU per
/embed on a 2-core Intel Xeon, a quarter of its front overhead. Without an
exporter every URL is excluded from the HTTP middleware's tracing, and the
tracer is OpenTelemetry's no-op one, which the gRPC interceptor (it has no
exclusions) then uses. With an exporter (`tracing.exporter_type` in BentoML's
configuration) every request is traced as BentoML does, and excluded URLs are
the user's.
"""

from __future__ import annotations

from bentoml._internal.configuration.containers import BentoMLContainer
from opentelemetry.trace import NoOpTracerProvider

EVERY_URL = [".*"]
"""OpenTelemetry searches each URL for the excluded ones as regular expressions."""


def trace_only_when_collected() -> None:
    """Without a tracing exporter: no URL traced (unless the user excludes some of their own) and no span made.

    Call before the service's HTTP app or gRPC server is built (at the import of service.py, in every API worker).
    """
    tracing = BentoMLContainer.config.tracing
    if tracing.exporter_type.get() is not None:
        return
    BentoMLContainer.tracer_provider.set(NoOpTracerProvider())
    if tracing.excluded_urls.get() is None:
        tracing.excluded_urls.set(EVERY_URL)
