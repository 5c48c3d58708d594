"""The onnxruntime build each target installs, and the start-up check that the installed one runs its configs.

A python-backend model opens its onnxruntime session on the provider its config names (`execution_provider`:
CPUExecutionProvider on cpu; CUDAExecutionProvider for the stateful decoder, which keeps the python backend on gpu
and gpu-tensorrt). onnxruntime only warns about a provider it lacks and runs on the CPU, so a gpu target on the CPU
build would serve, slowly, without a word: `python -m bionemo_serving.startup.launch` refuses it instead, before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnxruntime
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from bionemo_serving.model_catalog import Target
from bionemo_serving.startup.settings import REMOTE_REPOSITORY_SCHEMES, SettingsError


@dataclass(frozen=True)
class OnnxRuntimeBuild:
    """One onnxruntime build: a runtime extra of pyproject.toml, which `make lock` resolves into its own lock."""

    extra: str
    package: str
    providers: tuple[str, ...]
    """The execution providers it has (`onnxruntime.get_available_providers()`, Azure's left out)."""

    @property
    def lock(self) -> str:
        """The pins a bento of this runtime installs, relative to the project."""
        return f"operations/container/requirements-{self.extra}.lock"


CPU_BUILD = OnnxRuntimeBuild("cpu", "onnxruntime", ("CPUExecutionProvider",))
GPU_BUILD = OnnxRuntimeBuild(
    "gpu", "onnxruntime-gpu", ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
)
TARGET_BUILDS: dict[Target, OnnxRuntimeBuild] = {
    Target.CPU: CPU_BUILD,
    Target.GPU: GPU_BUILD,
    Target.GPU_TENSORRT: GPU_BUILD,
}
"""The runtime `build_bento.py --target` installs; the two builds are never installed together (one module)."""


class MissingExecutionProvider(SettingsError):
    """A config of the chosen target asks onnxruntime for a provider the installed build lacks."""


@dataclass(frozen=True)
class ProviderRequest:
    """A python-backend model's config and the execution provider it names."""

    model: str
    config: Path
    provider: str


def loaded_config(model_dir: Path, target: Target) -> Path | None:
    """The config tritonserver loads for this target: `configs/<target>.pbtxt` under `--model-config-name` (every
    target but cpu) where it exists, else `config.pbtxt`; None where the folder has neither."""
    custom = model_dir / "configs" / f"{target.value}.pbtxt"
    if target is not Target.CPU and custom.is_file():
        return custom
    default = model_dir / "config.pbtxt"
    return default if default.is_file() else None


def provider_requests(repository: Path, target: Target) -> list[ProviderRequest]:
    """The provider of every python-backend model of a local repository, as Triton would load it for `target`."""
    found: list[ProviderRequest] = []
    for model_dir in sorted(path for path in repository.iterdir() if path.is_dir()):
        config_file = loaded_config(model_dir, target)
        if config_file is None:
            continue
        try:
            config = text_format.Parse(config_file.read_text(), model_config_pb2.ModelConfig())
        except text_format.ParseError as error:
            raise SettingsError(f"{config_file}: not a Triton model config ({error})") from None
        if config.backend == "python" and "execution_provider" in config.parameters:
            provider = config.parameters["execution_provider"].string_value
            found.append(ProviderRequest(model_dir.name, config_file.relative_to(model_dir), provider))
    return found


def provider_source(provider: str) -> str:
    """Which of this project's onnxruntime builds has `provider`, and the lock that pins it."""
    runtimes = [runtime for runtime in (CPU_BUILD, GPU_BUILD) if provider in runtime.providers]
    if not runtimes:
        return f"no onnxruntime build of this project has {provider}"
    builds = " or ".join(
        f"{runtime.package} (pyproject's `{runtime.extra}` extra, {runtime.lock})" for runtime in runtimes
    )
    return f"{provider} comes with {builds}"


def require_providers(model_repository: str, target: Target) -> None:
    """MissingExecutionProvider, naming every model at fault, where the installed onnxruntime lacks a provider that
    a config of `target` names. A remote repository (s3://, ...) is tritonserver's to read: not checked."""
    if model_repository.startswith(REMOTE_REPOSITORY_SCHEMES):
        return
    available = onnxruntime.get_available_providers()
    requests = provider_requests(Path(model_repository), target)
    missing = [request for request in requests if request.provider not in available]
    if not missing:
        return
    models = ", ".join(
        f"{request.model} ({request.config}) asks onnxruntime for {request.provider}" for request in missing
    )
    sources = "; ".join(map(provider_source, dict.fromkeys(request.provider for request in missing)))
    raise MissingExecutionProvider(
        f"BIONEMO_TARGET={target.value}: {models}, which the installed onnxruntime {onnxruntime.__version__} lacks "
        f"(it has {', '.join(available)}) and would replace with the CPU. {sources}; a bento built with "
        f"`build_bento.py --target {target.value}` installs {TARGET_BUILDS[target].lock}"
    )
