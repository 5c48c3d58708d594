"""The bento, built for real: its Dockerfile, its targets, and the image's step that writes the tritonserver wrapper.

What the image's entrypoint serves (`serve` and `serve-grpc` with `--triton-options`, the options reaching Triton,
only the loaded model served, tritonserver on loopback only) is test_image_e2e.py's, in the image built from this
bento: checked on this machine too, it was the same entrypoint, options and checks, started twice more.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from build_bento import repository_is_complete
from support.bento import bentoml_environment, build
from support.paths import ROOT
from bionemo_serving.model_catalog import MODELS
from bionemo_serving.runtimes.engines import SHARED_WEIGHTS

pytestmark = pytest.mark.e2e

PROVISION_STEP = re.compile(
    r"^RUN (cd /home/bentoml/bento/src && /app/\.venv/bin/python .*-m operations\.tritonserver_setup --no-check)$", re.MULTILINE
)
BASE_IMAGE = re.compile(r"^FROM (nvcr\.io/nvidia/tritonserver:\d\d\.\d\d-py3) AS base-container$", re.MULTILINE | re.IGNORECASE)


def pins(requirements: str) -> set[str]:
    return {line.strip() for line in requirements.splitlines() if "==" in line and not line.lstrip().startswith("#")}


def containerfile(home: Path, bento: Path) -> str:
    """`bentoml.container.get_containerfile`, run from the temp folder: BentoML 1.4.39 refuses a
    dockerfile_template outside the working directory (bentoml/BentoML#5566)."""
    output = home / "Dockerfile"
    code = f"import bentoml; bentoml.container.get_containerfile('bionemo:{bento.name}', output_path={str(output)!r})"
    generated = subprocess.run(
        [sys.executable, "-c", code], cwd=tempfile.gettempdir(), env=bentoml_environment(home),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert generated.returncode == 0, generated.stderr[-3000:]
    return output.read_text()


@pytest.fixture(scope="module")
def bento_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BentoML home (bento store) of this module's own."""
    return tmp_path_factory.mktemp("bentoml-home")


@pytest.fixture(scope="module")
def cpu_bento(bento_home: Path) -> Path:
    return build(bento_home, "cpu")


@pytest.fixture(scope="module")
def gpu_bento(bento_home: Path) -> Path:
    return build(bento_home, "gpu")


@pytest.fixture(scope="module")
def dockerfile(bento_home: Path, cpu_bento: Path) -> str:
    """The cpu bento's generated Dockerfile."""
    return containerfile(bento_home, cpu_bento)


def test_dockerfile_builds_on_tritonserver_with_its_python_and_our_entrypoint(dockerfile: str, cpu_bento: Path) -> None:
    bentofile = yaml.safe_load((ROOT / "bentofile.yaml").read_text())
    image = BASE_IMAGE.search(dockerfile)
    assert image and image.group(1) == bentofile["docker"]["base_image"]
    # The venv the packages go into uses the image's own Python, the one its python-backend stub embeds.
    assert f"uv venv -p {bentofile['docker']['python_version']} /app/.venv" in dockerfile
    assert 'ENV PATH="/app/.venv/bin:$PATH"' in dockerfile
    assert "bash -euxo pipefail /home/bentoml/bento/env/python/install.sh" in dockerfile
    assert "ENV BIONEMO_HOST=$BIONEMO_HOST" in dockerfile and "ARG BIONEMO_HOST=0.0.0.0" in dockerfile
    assert "ARG BIONEMO_TARGET=cpu" in dockerfile
    entrypoints = re.findall(r"^ENTRYPOINT \[ \"(.+)\" \]$", dockerfile, re.MULTILINE)
    assert entrypoints[-1] == "/home/bentoml/bento/src/operations/container/entrypoint.sh"
    assert os.access(cpu_bento / "src" / "operations" / "container" / "entrypoint.sh", os.X_OK)


def test_image_starts_its_tritonserver_through_the_wrapper(dockerfile: str, cpu_bento: Path, tmp_path: Path) -> None:
    """The image's provisioning step, run here as the Dockerfile has it: the bento's own tritonserver_setup, a bare
    venv in place of /app/.venv, a fake installed tritonserver in place of the image's."""
    step = PROVISION_STEP.search(dockerfile)
    assert step, "no step writes the wrapper into /app/.venv/bin"
    bento_copied = dockerfile.index("COPY --chown=bentoml:bentoml . ./")
    assert bento_copied < step.start() < dockerfile.rindex("\nENTRYPOINT ")
    venv = tmp_path / "app-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    installed = tmp_path / "installed"
    installed.mkdir()
    fake = installed / "tritonserver"
    calls = tmp_path / "calls"
    fake.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    fake.chmod(0o755)
    image_like = dict(os.environ, PATH=os.pathsep.join([str(venv / "bin"), str(installed), os.environ["PATH"]]))

    command = step.group(1).replace("/home/bentoml/bento", str(cpu_bento)).replace("/app/.venv", str(venv))
    provisioned = subprocess.run(
        ["bash", "-c", command], env=image_like, check=False, capture_output=True, text=True, timeout=60
    )
    assert provisioned.returncode == 0, provisioned.stderr
    wrapper = venv / "bin" / "tritonserver"
    assert provisioned.stdout == f"tritonserver: {wrapper} (wrapper around installed {fake})\n"
    assert not calls.exists(), "provisioning started the server"
    # BentoML finds the wrapper first on PATH; it runs the installed server with the arguments it is given, after the
    # prefix it names the python backend's shared-memory regions by (its own pid).
    started = subprocess.run(["tritonserver", "--version"], env=image_like, check=False, timeout=60)
    own_prefix = r"--backend-config=python,shm-region-prefix-name=triton_python_backend_shm_region_\d+_"
    assert started.returncode == 0 and re.fullmatch(f"{own_prefix} --version\n", calls.read_text())


@pytest.mark.parametrize(
    ("target", "lock", "runtime", "other_runtime"),
    [("cpu", "requirements-cpu.lock", "onnxruntime", "onnxruntime-gpu"),
     ("gpu", "requirements-gpu.lock", "onnxruntime-gpu", "onnxruntime")],
)  # fmt: skip
def test_bento_installs_its_targets_lock_resolved_for_the_image_python(
    request: pytest.FixtureRequest, target: str, lock: str, runtime: str, other_runtime: str
) -> None:
    """The install step reads requirements.txt as it is: the target's lock, for the image's Python, not BentoML's own;
    its onnxruntime build is the one that has the providers of the target's configs, never both builds."""
    bento = request.getfixturevalue(f"{target}_bento")
    installed = pins((bento / "env" / "python" / "requirements.txt").read_text())
    assert installed == pins((ROOT / "operations" / "container" / lock).read_text())
    names = {pin.split("==")[0] for pin in installed}
    assert runtime in names and other_runtime not in names
    assert not (bento / "env" / "python" / "requirements.lock.txt").exists()


def test_bento_carries_every_model_with_every_target_config(cpu_bento: Path) -> None:
    repository = cpu_bento / "src" / "model_repository"
    assert repository_is_complete(repository)
    for description in MODELS.values():
        for graph in description.graphs:
            model_dir = repository / description.triton_name(graph.role)
            gpu_backend = "python" if graph.stateful else "onnxruntime"
            for name, backend in (("config.pbtxt", "python"), ("configs/gpu.pbtxt", gpu_backend)):
                config = text_format.Parse((model_dir / name).read_text(), model_config_pb2.ModelConfig())
                assert (config.name, config.backend) == (model_dir.name, backend)
        weights = {(repository / description.triton_name(graph.role) / "1" / SHARED_WEIGHTS) for graph in description.graphs}
        assert len({path.stat().st_ino for path in weights if path.exists()}) == 1, description.name  # linked again
    assert {path.parent.name for path in repository.glob("*/config.pbtxt")} == {
        "esm1nv", "esm1nv_language_model", "esm1nv_layers", "esm1nv_contacts", "esm2nv", "esm2nv_language_model",
        "esm2nv_layers", "esm2nv_contacts", "prott5nv", "prott5nv_layers", "megamolbart_encoder", "megamolbart_decoder",
        "megamolbart_layers",
    }  # fmt: skip


def test_gpu_target_sets_the_config_triton_loads(bento_home: Path, gpu_bento: Path) -> None:
    info = yaml.safe_load((gpu_bento / "bento.yaml").read_text())
    assert info["labels"]["target"] == "gpu"
    assert "ARG BIONEMO_TARGET=gpu" in containerfile(bento_home, gpu_bento)
