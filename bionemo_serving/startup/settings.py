"""Service settings, read once from the environment at start-up; a bad value stops start-up naming it.

docs/configuration.md's table lists every variable below. `python -m bionemo_serving.startup.launch`
(used by `make serve` and the container's entrypoint) checks them before it starts
anything; the service process reads the same variables again when it imports.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from bionemo_serving.model_catalog import MODELS, Target
from bionemo_serving.runtimes.choice import FORCED_RUNTIMES_FORM, RUNTIME_VARIABLE, forced_runtimes
from bionemo_serving.runtimes.engines import Runtime
from bionemo_serving.triton.options import ENVIRONMENT_VARIABLE as TRITON_OPTIONS_VARIABLE
from bionemo_serving.triton.options import MODEL_SELECTION_KEYS, TritonOption, TritonOptionError, parse_environment

PROJECT_ROOT = Path(__file__).resolve().parents[2]
REMOTE_REPOSITORY_SCHEMES = ("s3://", "gs://", "as://")
"""Repositories tritonserver reads itself (S3, Google Cloud Storage, Azure)."""

T = TypeVar("T")


class SettingsError(ValueError):
    """An environment variable holds a value the service cannot use."""


def _integer(raw: str, low: int, high: int | None = None) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError() from None
    if value < low or (high is not None and value > high):
        raise ValueError
    return value


def _host(raw: str) -> str:
    if not raw or any(character.isspace() for character in raw):
        raise ValueError
    return raw


def _model_repository(raw: str) -> str:
    """A remote URL as given; a local folder (relative to the project) resolved, and it must exist."""
    if raw.startswith(REMOTE_REPOSITORY_SCHEMES):
        return raw
    path = Path(raw)
    path = path if path.is_absolute() else PROJECT_ROOT / path
    if not path.is_dir():
        raise ValueError(f"no such folder: {path}")
    return str(path)


def _target(raw: str) -> Target:
    try:
        return Target(raw)
    except ValueError:
        raise ValueError() from None


MIN_ADMIN_TOKEN_LENGTH = 32


def _admin_token(raw: str) -> str | None:
    if not raw:
        return None
    if len(raw) < MIN_ADMIN_TOKEN_LENGTH or any(character.isspace() or not character.isprintable() for character in raw):
        raise ValueError
    return raw


ESM1NV_GRPC_MODELS = ("esm1nv", "esm2nv")
"""The models BioNeMo's esm1nv gRPC service could load (ESM-1nv, or ESM-2nv with `--model esm2nv_650M`)."""


def _esm1nv_grpc_model(raw: str) -> str:
    if raw not in ESM1NV_GRPC_MODELS:
        raise ValueError
    return raw


def _models(raw: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    unknown = [name for name in names if name not in MODELS]
    if not names or unknown:
        raise ValueError(f"known models: {', '.join(MODELS)}")
    return names


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, default and meaning (tests check docs/configuration.md's table against these)."""

    variable: str
    default: str
    meaning: str
    secret: bool = False
    """A bad value is not repeated in the error (it would end up in logs)."""


HOST = Setting("BIONEMO_HOST", "127.0.0.1", "address the API listens on (the image sets 0.0.0.0)")
PORT = Setting("BIONEMO_PORT", "3000", "port the API listens on (HTTP, or gRPC with `serve-grpc`)")
GRPC_METRICS_PORT = Setting(
    "BIONEMO_GRPC_METRICS_PORT", "3001", "port of the gRPC server's Prometheus metrics (`serve-grpc`), on BIONEMO_HOST"
)
ESM1NV_GRPC_MODEL = Setting(
    "BIONEMO_ESM1NV_GRPC_MODEL",
    "esm1nv",
    "which model answers BioNeMo's `bionemo.model.protein.esm1nv.grpc` service (`serve-grpc`): esm1nv or esm2nv",
)
API_WORKERS = Setting("BIONEMO_API_WORKERS", "", "BentoML API worker processes; unset: one per CPU core (BentoML's default)")
MODEL_REPOSITORY = Setting(
    "BIONEMO_MODEL_REPOSITORY",
    "model_repository",
    "Triton model repository: a folder (relative to the project) or s3://, gs://, as:// read by tritonserver",
)
SERVED_MODELS = Setting(
    "BIONEMO_MODELS", "", "comma-separated models to load (Triton's explicit model control); unset: all in the repository"
)
TARGET = Setting("BIONEMO_TARGET", "cpu", "which generated config Triton loads: cpu, gpu or gpu-tensorrt")
TRITON_LOG_VERBOSE = Setting("BIONEMO_TRITON_LOG_VERBOSE", "0", "tritonserver's --log-verbose level")
TRITON_OPTIONS = Setting(
    TRITON_OPTIONS_VARIABLE, "", "more tritonserver options: KEY=VALUE items separated by spaces, as --triton-options takes them"
)
MAX_SEQUENCES = Setting("BIONEMO_MAX_SEQUENCES_PER_REQUEST", "64", "most sequences or SMILES in one request")
MAX_SCORE_PASSES = Setting(
    "BIONEMO_MAX_SCORE_PASSES",
    "1024",
    "most model passes one /score request may take (a scan of N residues by masked marginal takes N; pseudo-likelihood "
    "takes a sequence's length per mutant); past it a 422",
)
MAX_BODY = Setting(
    "BIONEMO_MAX_REQUEST_BYTES", "33554432", "largest request body in bytes (32 MiB); a larger one is a 413, unread"
)
MAX_IN_FLIGHT = Setting(
    "BIONEMO_MAX_IN_FLIGHT", "64", "requests one API worker holds at once, running or queued; past it a 503 with Retry-After"
)
MAX_RUNNING = Setting(
    "BIONEMO_MAX_RUNNING",
    "4",
    "requests one API worker runs on Triton at once while together they are short (a long one runs alone); the "
    "others wait, fairly between clients; one that could not finish in time is refused at once (503 or 429)",
)
ADMIN_TOKEN = Setting(
    "BIONEMO_ADMIN_TOKEN",
    "",
    f"enables the admin endpoints (/admin/*), which require it as a Bearer token; at least {MIN_ADMIN_TOKEN_LENGTH} "
    "characters, e.g. `openssl rand -hex 32`; unset: no admin endpoints",
    secret=True,
)
REQUEST_TIMEOUT = Setting(
    "BIONEMO_REQUEST_TIMEOUT_S",
    "120",
    "seconds a request may take; past it a 504, its work cancelled (BentoML's own deadline, "
    "api_server.traffic.timeout, is set 30 s later)",
)
RUNTIME = Setting(
    RUNTIME_VARIABLE,
    "auto",
    "which runtime runs each model's timed graphs on CPU: auto (the fastest of onnxruntime, onnxruntime-fused and "
    "openvino, timed here at start-up), one runtime for every model (also torchscript), or model=runtime items "
    "separated by commas",
)
TRITON_METRICS_PORT_VARIABLE = "BIONEMO_TRITON_METRICS_PORT"
"""Internal, not a setting: the loopback port of Triton's metrics, chosen once by startup.launch, so that the
`bentoml serve` process that starts tritonserver and every API worker that scrapes it agree."""
ALL_SETTINGS = (
    HOST, PORT, API_WORKERS, MODEL_REPOSITORY, SERVED_MODELS, TARGET, TRITON_LOG_VERBOSE, TRITON_OPTIONS, MAX_SEQUENCES,
    MAX_SCORE_PASSES, MAX_BODY, MAX_IN_FLIGHT, MAX_RUNNING, REQUEST_TIMEOUT, ADMIN_TOKEN, RUNTIME, GRPC_METRICS_PORT,
    ESM1NV_GRPC_MODEL,
)  # fmt: skip


@dataclass(frozen=True)
class Settings:
    host: str
    port: int
    api_workers: int | None
    model_repository: str
    models: tuple[str, ...] | None
    """Catalog names Triton loads; None loads every model in the repository."""
    target: Target
    triton_log_verbose: int
    triton_options: tuple[TritonOption, ...]
    max_sequences_per_request: int
    max_score_passes: int
    max_request_bytes: int
    max_in_flight: int
    max_running: int
    request_timeout_s: float
    admin_token: str | None = field(repr=False)
    """None: no admin endpoints."""
    runtimes: dict[str, Runtime] = field(default_factory=dict)
    """Catalog names whose graphs (encoder, and decoder where it has one) run on the runtime given; the others on the
    fastest measured."""
    triton_metrics_port: int | None = None
    """Triton's metrics on 127.0.0.1 at this port; None (a start without startup.launch): Triton's metrics off."""
    grpc_metrics_port: int = 3001
    esm1nv_grpc_model: str = "esm1nv"

    @classmethod
    def from_environment(cls, environment: Mapping[str, str] = os.environ) -> Settings:
        def read(setting: Setting, parse: Callable[[str], T], expected: str) -> T:
            raw = environment.get(setting.variable, setting.default)
            try:
                return parse(raw)
            except TritonOptionError as error:
                raise SettingsError(str(error)) from None
            except ValueError as error:
                detail = f" ({error})" if str(error) else ""
                shown = "(the value set)" if setting.secret else repr(raw)
                raise SettingsError(f"{setting.variable}={shown}: expected {expected}{detail}") from None

        settings = cls(
            host=read(HOST, _host, "a host name or IP address"),
            port=read(PORT, lambda raw: _integer(raw, 1, 65535), "a port number from 1 to 65535"),
            api_workers=read(API_WORKERS, lambda raw: _integer(raw, 1) if raw else None, "a positive integer"),
            model_repository=read(MODEL_REPOSITORY, _model_repository, "a folder or an s3://, gs://, as:// URL"),
            models=read(SERVED_MODELS, lambda raw: _models(raw) if raw else None, "comma-separated model names"),
            target=read(TARGET, _target, f"one of {', '.join(target.value for target in Target)}"),
            triton_log_verbose=read(TRITON_LOG_VERBOSE, lambda raw: _integer(raw, 0), "an integer >= 0"),
            triton_options=read(TRITON_OPTIONS, parse_environment, "KEY=VALUE items"),
            max_sequences_per_request=read(MAX_SEQUENCES, lambda raw: _integer(raw, 1), "a positive integer"),
            max_score_passes=read(MAX_SCORE_PASSES, lambda raw: _integer(raw, 1), "a positive integer"),
            max_request_bytes=read(MAX_BODY, lambda raw: _integer(raw, 1), "a positive integer"),
            max_in_flight=read(MAX_IN_FLIGHT, lambda raw: _integer(raw, 1), "a positive integer"),
            max_running=read(MAX_RUNNING, lambda raw: _integer(raw, 1), "a positive integer"),
            request_timeout_s=read(REQUEST_TIMEOUT, _positive_seconds, "a positive number of seconds"),
            admin_token=read(
                ADMIN_TOKEN, _admin_token, f"at least {MIN_ADMIN_TOKEN_LENGTH} printable characters without spaces"
            ),
            runtimes=read(RUNTIME, lambda raw: forced_runtimes(raw, MODELS), FORCED_RUNTIMES_FORM),
            triton_metrics_port=_triton_metrics_port(environment.get(TRITON_METRICS_PORT_VARIABLE, "")),
            grpc_metrics_port=read(GRPC_METRICS_PORT, lambda raw: _integer(raw, 1, 65535), "a port number from 1 to 65535"),
            esm1nv_grpc_model=read(ESM1NV_GRPC_MODEL, _esm1nv_grpc_model, f"one of {', '.join(ESM1NV_GRPC_MODELS)}"),
        )
        if settings.runtimes and settings.model_repository.startswith(REMOTE_REPOSITORY_SCHEMES):
            raise SettingsError(
                f"{RUNTIME.variable}: refused with a remote {MODEL_REPOSITORY.variable}; each model runs the runtime "
                "its config in the repository records (record one before uploading: `BIONEMO_RUNTIME=... python -m "
                "bionemo_serving.runtimes.choice --repository FOLDER --write-configs`)"
            )
        chosen_by_options = [option for option in settings.triton_options if option.key in MODEL_SELECTION_KEYS]
        if chosen_by_options and settings.models is not None:
            raise SettingsError(
                f"{SERVED_MODELS.variable} and --triton-options {chosen_by_options[0].key} both choose the models; "
                "use one of them"
            )
        if chosen_by_options and settings.admin_token is not None:
            raise SettingsError(
                f"--triton-options {chosen_by_options[0].key}: refused with {ADMIN_TOKEN.variable} set; the admin "
                f"endpoints need Triton's explicit model control (choose the models with {SERVED_MODELS.variable})"
            )
        return settings

    def loaded_models(self) -> tuple[str, ...] | None:
        """Catalog names of the models Triton loads as it starts: BIONEMO_MODELS, or under `--triton-options
        model-control-mode=explicit` those with a graph that a `load-model` names (none without one); None: every
        model in the repository (`load-model=*` too)."""
        if self.models is not None:
            return self.models
        modes = [option.value for option in self.triton_options if option.key == "model-control-mode"]
        if not modes or modes[-1] != "explicit":
            return None
        named = {option.value for option in self.triton_options if option.key == "load-model"}
        if "*" in named:
            return None
        return tuple(
            name for name, model in MODELS.items() if any(model.triton_name(graph.role) in named for graph in model.graphs)
        )


def _triton_metrics_port(raw: str) -> int | None:
    if not raw:
        return None
    try:
        return _integer(raw, 1, 65535)
    except ValueError:
        raise SettingsError(f"{TRITON_METRICS_PORT_VARIABLE}={raw!r}: expected a port number from 1 to 65535") from None


def _positive_seconds(raw: str) -> float:
    seconds = float(raw)
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError
    return seconds


@functools.cache
def current_settings() -> Settings:
    """This process's settings, read from its environment on first use."""
    return Settings.from_environment()
