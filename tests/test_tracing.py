"""serving/startup/tracing.py: spans are made exactly when a tracing exporter would collect them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bentoml._internal.configuration.containers import BentoMLContainer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NoOpTracerProvider

from serving.startup.tracing import EVERY_URL, trace_only_when_collected


@pytest.fixture
def tracing() -> Iterator:
    config = BentoMLContainer.config.tracing
    saved = config.exporter_type.get(), config.excluded_urls.get()
    provider = BentoMLContainer.tracer_provider
    with provider.patch(provider.get()):  # BentoML's own provider, and nothing set on it left after the test
        yield config
    config.exporter_type.set(saved[0])
    config.excluded_urls.set(saved[1])


def test_without_an_exporter_no_url_is_traced(tracing) -> None:
    tracing.exporter_type.set(None)
    tracing.excluded_urls.set(None)
    trace_only_when_collected()
    assert tracing.excluded_urls.get() == EVERY_URL
    assert isinstance(BentoMLContainer.tracer_provider.get(), NoOpTracerProvider)  # what the gRPC interceptor uses


def test_with_an_exporter_every_url_is_traced(tracing) -> None:
    tracing.exporter_type.set("otlp")
    tracing.excluded_urls.set(None)
    trace_only_when_collected()
    assert tracing.excluded_urls.get() is None
    assert isinstance(BentoMLContainer.tracer_provider.get(), TracerProvider)


def test_the_users_exclusions_are_kept(tracing) -> None:
    tracing.exporter_type.set(None)
    tracing.excluded_urls.set("/livez,/readyz")
    trace_only_when_collected()
    assert tracing.excluded_urls.get() == "/livez,/readyz"
