"""Start the service: `python -m bionemo_serving.startup.launch [--grpc] TARGET [--triton-options KEY=VALUE]... [bentoml options]`.

TARGET is `service:svc` in a checkout, or a bento tag or folder. `make serve`, the
tests and the container's entrypoint all start the service this way, so that
`--triton-options` (which `bentoml serve` no longer takes) work everywhere: they
join BIONEMO_TRITON_OPTIONS, which the service turns into tritonserver arguments.
Every setting is checked before anything starts, and so is the installed
onnxruntime against the providers the target's configs name
(bionemo_serving/startup/target_runtime.py), and an s3:// repository is listed with the credentials tritonserver
will use (bionemo_serving/startup/remote_repository.py); each timed graph of a local repository gets the runtime
measured fastest on this machine (bionemo_serving/runtimes/choice.py), served from a folder of this start's own
(bionemo_serving/runtimes/served_repository.py), so that no start changes what another serves; then this process
becomes `bentoml serve`, keeping its PID. With `--grpc` it becomes `bentoml serve-grpc`
instead, with the same settings and Triton runner, the gRPC configuration the
settings imply (`command_lines.bentoml_config_options`) added to BENTOML_CONFIG_OPTIONS, and
grpcio's I/O path chosen (GRPC_SERVER_EXPERIMENTS). Either way, without a tracing
exporter no request span is made (bionemo_serving/startup/tracing.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from bionemo_serving.model_catalog import Target
from bionemo_serving.runtimes.choice import RuntimeChoiceError, choose_runtimes
from bionemo_serving.runtimes.served_repository import served_repository
from bionemo_serving.startup.command_lines import bentoml_config_options, serve_arguments
from bionemo_serving.startup.remote_repository import check_s3_repository
from bionemo_serving.startup.settings import (
    MODEL_REPOSITORY,
    REMOTE_REPOSITORY_SCHEMES,
    TRITON_METRICS_PORT_VARIABLE,
    Settings,
    SettingsError,
)
from bionemo_serving.startup.target_runtime import require_providers
from bionemo_serving.startup.tracing import BENTOML_CONFIG_OPTIONS, untraced_environment
from bionemo_serving.triton.options import (
    ENVIRONMENT_VARIABLE,
    TritonOptionError,
    parse_environment,
    render_environment,
    split_arguments,
)
from bionemo_serving.startup.readiness import free_loopback_port

USAGE = "usage: python -m bionemo_serving.startup.launch [--grpc] TARGET [--triton-options KEY=VALUE]... [bentoml serve options]"
GRPC_FLAG = "--grpc"
PROMETHEUS_DIRECTORY_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
GRPC_EXPERIMENTS_VARIABLE = "GRPC_EXPERIMENTS"
GRPC_SERVER_EXPERIMENTS = "-event_engine_listener,-event_engine_for_all_other_endpoints"
"""grpcio 1.81's EventEngine listener and endpoints turned off, for gRPC's earlier I/O path: the gRPC API workers
then spent about as much CPU per /embed of the bench's mix as the HTTP ones (5.78 and 5.58 ms against 5.76 and
5.28 ms), where with them on they spent 7.19 and 6.25 ms (2388e29 and 0b436af, docs/performance.md). A
GRPC_EXPERIMENTS of the environment is kept as it is."""


def serve_command(argv: Sequence[str], environment: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The `bentoml serve` (`serve-grpc` after `--grpc`) command line and its environment; SettingsError for any bad
    setting or option, or for a target whose configs the installed onnxruntime cannot run."""
    grpc = bool(argv) and argv[0] == GRPC_FLAG
    if grpc:
        argv = argv[1:]
    if not argv or argv[0].startswith("-"):
        raise SettingsError(USAGE)
    target, *rest = argv
    options, passed_on = split_arguments(rest)
    # One port for Triton's metrics, chosen here: `bentoml serve` starts tritonserver with it, every API worker reads it.
    child_environment = dict(environment, **{TRITON_METRICS_PORT_VARIABLE: str(free_loopback_port())})
    if options:
        inherited = parse_environment(environment.get(ENVIRONMENT_VARIABLE, ""))
        child_environment[ENVIRONMENT_VARIABLE] = render_environment(inherited + options)
    settings = Settings.from_environment(child_environment)
    require_providers(settings.model_repository, settings.target)
    # The settings' items last: they win over the same keys in the inherited options.
    bentoml_options = [environment.get(BENTOML_CONFIG_OPTIONS, ""), *bentoml_config_options(settings, grpc)]
    child_environment[BENTOML_CONFIG_OPTIONS] = " ".join(option for option in bentoml_options if option)
    if grpc:
        # BentoML 1.4.39 starts serve-grpc's metrics server without the directory where its API workers write their
        # metrics (every scrape was a 500): it inherits this environment, so it gets the same one from here.
        child_environment.setdefault(PROMETHEUS_DIRECTORY_VARIABLE, prometheus_directory(environment))
        child_environment.setdefault(GRPC_EXPERIMENTS_VARIABLE, GRPC_SERVER_EXPERIMENTS)
    child_environment.update(untraced_environment(child_environment))
    serve = "serve-grpc" if grpc else "serve"
    command = [sys.executable, "-m", "bentoml", serve, target, "--production", *serve_arguments(settings)]
    return command + passed_on, child_environment


def prometheus_directory(environment: Mapping[str, str]) -> str:
    """Where BentoML's API workers keep their metrics: `prometheus_multiproc_dir` in BentoML's home."""
    home = environment.get("BENTOML_HOME", os.path.join(os.path.expanduser("~"), "bentoml"))
    return os.path.join(home, "prometheus_multiproc_dir")


def served_with_chosen_runtimes(settings: Settings) -> str:
    """The repository tritonserver is to serve: a local one served from a folder of this start's own, whose timed
    graphs' configs name the runtime chosen here, measured where the repository's record does not hold for this
    machine (runtimes/served_repository.py). Models Triton will not load are not timed (an image without torch
    times every graph anew: minutes each). A GPU target, or a remote repository, is served as it is."""
    if settings.target is not Target.CPU or settings.model_repository.startswith(REMOTE_REPOSITORY_SCHEMES):
        return settings.model_repository  # GPU configs run onnxruntime on the GPU; a remote repository's configs run what they record
    repository = Path(settings.model_repository)
    choices = choose_runtimes(
        repository, settings.runtimes, settings.loaded_models(), report=lambda line: print(f"bionemo: {line}")
    )
    try:
        return str(served_repository(repository, choices))
    except OSError as error:  # no temporary directory to write to
        print(f"bionemo: runtimes not chosen ({error}); each model runs the one its config names", file=sys.stderr)
        return settings.model_repository


def read_remote_repository(settings: Settings) -> None:
    """An s3:// repository listed before tritonserver starts (bionemo_serving/startup/remote_repository.py)."""
    if settings.model_repository.startswith("s3://"):
        folders = check_s3_repository(settings.model_repository)
        print(f"bionemo: {settings.model_repository}: model folders {', '.join(folders)}")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        command, environment = serve_command(sys.argv[1:] if argv is None else argv, os.environ)
        settings = Settings.from_environment(environment)
        read_remote_repository(settings)
        environment[MODEL_REPOSITORY.variable] = served_with_chosen_runtimes(settings)
    except (SettingsError, TritonOptionError, RuntimeChoiceError) as error:
        print(f"bionemo: {error}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execve(command[0], command, environment)
    return 0  # not reached: execve replaces this process


if __name__ == "__main__":
    sys.exit(main())
