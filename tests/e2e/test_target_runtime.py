"""The start-up check of the installed onnxruntime against the exported configs of each target.

This machine has the cpu target's onnxruntime (the CPU build, pyproject's `cpu` extra): the cpu configs must
pass and the gpu ones be refused, naming what is missing and where it comes from.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnxruntime
import pytest

from bionemo_serving.model_catalog import MODELS, Target
from bionemo_serving.startup.settings import PROJECT_ROOT, SettingsError
from bionemo_serving.startup.target_runtime import (
    CPU_BUILD,
    GPU_BUILD,
    MissingExecutionProvider,
    ProviderRequest,
    provider_requests,
    require_providers,
)

pytestmark = pytest.mark.e2e

REPOSITORY = PROJECT_ROOT / "model_repository"
GPU_TARGETS = pytest.mark.parametrize("target", [Target.GPU, Target.GPU_TENSORRT], ids=lambda target: target.value)


@pytest.fixture(scope="module", autouse=True)
def exported_repository() -> None:
    """The default models as `make models` exports them, a config per target each."""
    names = {description.triton_name(graph.role) for description in MODELS.values() for graph in description.graphs}
    missing = [name for name in sorted(names) if not (REPOSITORY / name / "configs" / "gpu.pbtxt").is_file()]
    if missing:
        pytest.fail(f"model_repository lacks {missing}: run `make models` (make test does) first")


def test_this_machine_has_the_cpu_build_of_onnxruntime() -> None:
    available = onnxruntime.get_available_providers()
    assert set(CPU_BUILD.providers) <= set(available)
    assert not (set(GPU_BUILD.providers) - set(CPU_BUILD.providers)) & set(available)


def test_every_cpu_config_runs_on_this_onnxruntime() -> None:
    requests = provider_requests(REPOSITORY, Target.CPU)
    assert {request.model for request in requests} == {
        "esm1nv", "esm1nv_language_model", "esm1nv_layers", "esm1nv_contacts",
        "esm2nv", "esm2nv_language_model", "esm2nv_layers", "esm2nv_contacts",
        "prott5nv", "prott5nv_layers", "megamolbart_encoder", "megamolbart_decoder", "megamolbart_layers",
    }  # fmt: skip
    assert {(request.config, request.provider) for request in requests} == {
        (Path("config.pbtxt"), "CPUExecutionProvider")
    }
    require_providers(str(REPOSITORY), Target.CPU)


@GPU_TARGETS
def test_a_gpu_target_is_refused_naming_the_model_the_provider_and_its_lock(target: Target) -> None:
    """Only the stateful decoder keeps the python backend on the gpu targets; the others run in Triton's own
    onnxruntime backend, which this check does not concern."""
    assert provider_requests(REPOSITORY, target) == [
        ProviderRequest("megamolbart_decoder", Path("configs") / f"{target.value}.pbtxt", "CUDAExecutionProvider")
    ]
    with pytest.raises(MissingExecutionProvider) as refused:
        require_providers(str(REPOSITORY), target)
    message = str(refused.value)
    assert message.startswith(
        f"BIONEMO_TARGET={target.value}: megamolbart_decoder (configs/{target.value}.pbtxt) asks onnxruntime for "
        f"CUDAExecutionProvider, which the installed onnxruntime {onnxruntime.__version__} lacks (it has "
        f"{', '.join(onnxruntime.get_available_providers())})"
    )
    assert "CUDAExecutionProvider comes with onnxruntime-gpu (pyproject's `gpu` extra, " in message
    assert "operations/container/requirements-gpu.lock)" in message
    assert message.endswith(
        f"`build_bento.py --target {target.value}` installs operations/container/requirements-gpu.lock"
    )


def test_a_model_without_the_targets_config_is_read_from_its_default_one(tmp_path: Path) -> None:
    """tritonserver's --model-config-name falls back to config.pbtxt; a folder without a config is no model of ours."""
    (tmp_path / "esm2nv").mkdir()
    shutil.copy(REPOSITORY / "esm2nv" / "config.pbtxt", tmp_path / "esm2nv" / "config.pbtxt")
    (tmp_path / "notes").mkdir()
    assert provider_requests(tmp_path, Target.GPU) == [
        ProviderRequest("esm2nv", Path("config.pbtxt"), "CPUExecutionProvider")
    ]
    require_providers(str(tmp_path), Target.GPU)


def test_an_unreadable_config_is_a_settings_error(tmp_path: Path) -> None:
    (tmp_path / "esm2nv").mkdir()
    (tmp_path / "esm2nv" / "config.pbtxt").write_text('backend: "python"\nmax_batch: 3\n')
    with pytest.raises(SettingsError, match="esm2nv/config.pbtxt: not a Triton model config"):
        require_providers(str(tmp_path), Target.CPU)


def test_a_remote_repository_is_left_to_tritonserver() -> None:
    require_providers("s3://bucket/models", Target.GPU)


def test_launcher_refuses_a_gpu_target_before_starting_anything() -> None:
    """As the tests and `make serve` start the service (support.service.start_launcher), with BIONEMO_TARGET=gpu: exit
    2, the one line of the refusal and nothing else, from bentoml or tritonserver."""
    environment = dict(os.environ, BIONEMO_MODEL_REPOSITORY=str(REPOSITORY), BIONEMO_TARGET="gpu")
    launched = subprocess.run(
        [sys.executable, "-m", "bionemo_serving.startup.launch", "service:svc"],
        cwd=PROJECT_ROOT, env=environment, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert launched.returncode == 2, launched.stderr
    assert launched.stdout == ""
    (line,) = launched.stderr.splitlines()
    assert line.startswith("bionemo: BIONEMO_TARGET=gpu: megamolbart_decoder (configs/gpu.pbtxt) asks onnxruntime for ")
    assert "operations/container/requirements-gpu.lock" in line
