"""The command lines the settings imply: tritonserver's arguments (through the runner's `cli_args`), `bentoml serve`'s
options and BentoML's configuration items. `python -m bionemo_serving.startup.launch` and service.py build them from the
settings (settings.py) they read."""

from __future__ import annotations

from pathlib import Path

from bionemo_serving.model_catalog import MODELS, Target
from bionemo_serving.startup.settings import REMOTE_REPOSITORY_SCHEMES, Settings

BENTOML_DEADLINE_MARGIN_S = 30
"""How long after this service's own deadline BentoML's cuts a request: time for the 504 to be written."""


def graphs_of(settings: Settings, name: str) -> list[str]:
    """The Triton models of catalogued model `name` to load: every required graph, and each optional one (a head)
    that a local repository has; a remote repository is not listed here, and must hold them all."""
    description = MODELS[name]
    local = not settings.model_repository.startswith(REMOTE_REPOSITORY_SCHEMES)
    return [
        description.triton_name(graph.role)
        for graph in description.graphs
        if not (graph.optional and local and not (Path(settings.model_repository) / description.triton_name(graph.role)).is_dir())
    ]


def triton_arguments(settings: Settings) -> list[str]:
    """tritonserver arguments for the runner's `cli_args` (it adds the repository, port and loopback address)."""
    arguments = ["--allow-metrics=false"]
    if settings.triton_metrics_port is not None:  # loopback only: the service's GET /metrics carries them
        arguments = ["--allow-metrics=true", "--metrics-address=127.0.0.1", f"--metrics-port={settings.triton_metrics_port}"]
    # A model that fails to load leaves tritonserver up, not ready (strict readiness: /readyz answers 503), with
    # the reason in its log and the other models loaded; tritonserver's default exits, and the runner restarted it
    # in a loop that loaded every model again each time.
    arguments.append("--exit-on-error=false")
    if settings.target is not Target.CPU:
        arguments.append(f"--model-config-name={settings.target.value}")
    # Triton loads and unloads models once started only under explicit model control (BIONEMO_MODELS, the admin
    # endpoints); otherwise nothing can make it, not even a process on this host that reaches its loopback port.
    if settings.models is not None:
        arguments.append("--model-control-mode=explicit")
        arguments += [f"--load-model={triton_model}" for name in settings.models for triton_model in graphs_of(settings, name)]
    elif settings.admin_token is not None:
        arguments += ["--model-control-mode=explicit", "--load-model=*"]
    return arguments + [option.argument() for option in settings.triton_options]


def serve_arguments(settings: Settings) -> list[str]:
    """`bentoml serve` (and `serve-grpc`) options that come from the settings."""
    arguments = ["--host", settings.host, "--port", str(settings.port)]
    if settings.api_workers is not None:
        arguments += ["--api-workers", str(settings.api_workers)]
    return arguments


def bentoml_config_options(settings: Settings, grpc: bool) -> list[str]:
    """BentoML configuration (`BENTOML_CONFIG_OPTIONS` items): BentoML's own deadline past this service's
    (BIONEMO_REQUEST_TIMEOUT_S), whose 504 says what ran out; its default, 60 s, cut a 1,000-residue scan
    given an hour with "Not able to process the request in 60 seconds". For `bentoml serve-grpc` also: messages
    up to BIONEMO_MAX_REQUEST_BYTES each way (larger: RESOURCE_EXHAUSTED), server reflection on, and the
    Prometheus metrics server on the API's host instead of BentoML's default 0.0.0.0."""
    deadline = [f"api_server.traffic.timeout={settings.request_timeout_s + BENTOML_DEADLINE_MARGIN_S:g}"]
    if not grpc:
        return deadline
    return deadline + [
        f"api_server.grpc.max_message_length={settings.max_request_bytes}",
        "api_server.grpc.reflection.enabled=true",
        f"api_server.grpc.metrics.host={settings.host}",
        f"api_server.grpc.metrics.port={settings.grpc_metrics_port}",
    ]
