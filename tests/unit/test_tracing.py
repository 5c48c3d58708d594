"""bionemo_serving/startup/tracing.py: the launcher's environment makes BentoML create spans exactly when a tracing exporter
would collect them, as BentoML itself reads that environment."""

from __future__ import annotations

from pathlib import Path

from bentoml._internal.configuration.containers import BentoMLConfiguration
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan

from bionemo_serving.startup.launch import serve_command
from bionemo_serving.startup.tracing import EVERY_URL


def bentoml_tracing(environment: dict[str, str]) -> dict:
    """The `tracing` section BentoML builds from the launcher's environment (test-only use of its configuration)."""
    config = BentoMLConfiguration(
        override_config_file=environment.get("BENTOML_CONFIG"),
        override_config_values=environment.get("BENTOML_CONFIG_OPTIONS"),
    )
    return config.to_dict()["tracing"]


def makes_spans(environment: dict[str, str], monkeypatch) -> bool:
    """Whether a tracer of an OpenTelemetry SDK provider, as BentoML builds one, records a span in `environment`."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", environment.get("OTEL_SDK_DISABLED", "false"))
    span = TracerProvider().get_tracer("bentoml").start_span("request")
    return not isinstance(span, NonRecordingSpan) or span.get_span_context().is_valid


def test_without_an_exporter_no_url_is_traced_and_no_span_is_made(monkeypatch) -> None:
    for grpc in ([], ["--grpc"]):
        _, environment = serve_command([*grpc, "service:svc"], {})
        assert bentoml_tracing(environment)["excluded_urls"] == EVERY_URL
        assert environment["OTEL_SDK_DISABLED"] == "true"
        assert not makes_spans(environment, monkeypatch)


def test_with_an_exporter_every_url_is_traced(monkeypatch, tmp_path: Path) -> None:
    config = tmp_path / "bentoml.yaml"
    config.write_text("tracing:\n  exporter_type: otlp\n")
    for configured in ({"BENTOML_CONFIG_OPTIONS": "tracing.exporter_type=otlp"}, {"BENTOML_CONFIG": str(config)}):
        _, environment = serve_command(["service:svc"], configured)
        assert bentoml_tracing(environment)["excluded_urls"] is None
        assert "OTEL_SDK_DISABLED" not in environment
        assert makes_spans(environment, monkeypatch)


def test_the_users_exclusions_and_switch_are_kept() -> None:
    _, environment = serve_command(
        ["service:svc"], {"BENTOML_CONFIG_OPTIONS": "tracing.excluded_urls=/livez,/readyz", "OTEL_SDK_DISABLED": "false"}
    )
    assert bentoml_tracing(environment)["excluded_urls"] == "/livez,/readyz"
    assert environment["OTEL_SDK_DISABLED"] == "false"
