"""Request spans only where someone collects them.

BentoML makes a server span for every request, in its HTTP middleware and in
its gRPC server's interceptor, and with no tracing exporter configured
(BentoML's default) nothing ever reads them: 0.5 ms of an API worker's CPU per
/embed on a 2-core Intel Xeon, a quarter of its front overhead. So the launcher,
before BentoML starts, looks at the user's BentoML configuration (the file
`BENTOML_CONFIG` names, then `BENTOML_CONFIG_OPTIONS`): where it names no
tracing exporter, OpenTelemetry's SDK is turned off (`OTEL_SDK_DISABLED`: BentoML's
tracer provider then hands out no-op tracers, to the middleware and the gRPC
interceptor alike) and every URL is excluded from the HTTP middleware
(`tracing.excluded_urls`), unless the user excludes some of their own. With an
exporter every request is traced as BentoML does.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

BENTOML_CONFIG_FILE = "BENTOML_CONFIG"
BENTOML_CONFIG_OPTIONS = "BENTOML_CONFIG_OPTIONS"
OTEL_SDK_DISABLED = "OTEL_SDK_DISABLED"
EVERY_URL = ".*"
"""OpenTelemetry searches each URL for the excluded ones as regular expressions."""


def untraced_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """The variables that `environment` needs changed for BentoML to make no span: none where the user's BentoML
    configuration names a tracing exporter. The user's own OTEL_SDK_DISABLED and excluded URLs are kept."""
    tracing = _tracing_configuration(environment)
    if tracing.get("exporter_type") is not None:
        return {}
    changed = {OTEL_SDK_DISABLED: environment.get(OTEL_SDK_DISABLED, "true")}
    if tracing.get("excluded_urls") is None:
        options = environment.get(BENTOML_CONFIG_OPTIONS, "")
        changed[BENTOML_CONFIG_OPTIONS] = f"{options} tracing.excluded_urls={EVERY_URL}".strip()
    return changed


def _tracing_configuration(environment: Mapping[str, str]) -> dict[str, Any]:
    """The `tracing` keys the user's BentoML configuration sets: its file's, then BENTOML_CONFIG_OPTIONS' (which win,
    as in BentoML)."""
    tracing: dict[str, Any] = {}
    if environment.get(BENTOML_CONFIG_FILE):
        configuration = yaml.safe_load(Path(environment[BENTOML_CONFIG_FILE]).read_text()) or {}
        tracing.update(configuration.get("tracing") or {})
    for item in shlex.split(environment.get(BENTOML_CONFIG_OPTIONS, "")):
        key, _, value = item.partition("=")
        if key.startswith("tracing."):
            tracing[key.removeprefix("tracing.")] = value
    return tracing
