"""Each runtime's lock: exactly the run-time pins of pyproject.toml and its extra, resolved for the image's Python."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from operations.container.image import STAND_IN_LOCK, STAND_IN_PYTHON
from bionemo_serving.model_catalog import Target
from bionemo_serving.startup.target_runtime import CPU_BUILD, GPU_BUILD, TARGET_BUILDS, OnnxRuntimeBuild

ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = pytest.mark.parametrize("runtime", [CPU_BUILD, GPU_BUILD], ids=lambda runtime: runtime.extra)


def lock_text(lock: str) -> str:
    return (ROOT / lock).read_text()


def locked_versions(lock: str) -> dict[str, str]:
    """The pins of the lock at `lock` (a path from the repository's root), by name."""
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", lock_text(lock), re.MULTILINE)
    return {name.lower().replace("_", "-"): version for name, version in pins}


def makefile_setting(name: str) -> str:
    """The value of the Makefile's `NAME := value`."""
    return re.search(rf"^{name} := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)


def requirement_pin(requirement: str) -> tuple[str, str]:
    name, version = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", requirement).groups()
    return name.lower(), version


@RUNTIMES
def test_lock_pins_every_runtime_dependency_and_its_extra_at_their_pyproject_versions(runtime: OnnxRuntimeBuild) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = dict(map(requirement_pin, project["optional-dependencies"][runtime.extra]))
    locked = locked_versions(runtime.lock)
    for name, version in [*map(requirement_pin, project["dependencies"]), *extra.items()]:
        assert locked.get(name) == version, name
    assert runtime.package in extra, f"the {runtime.extra} extra does not pin {runtime.package}"
    # Both builds install the `onnxruntime` module: one lock, one build.
    assert {CPU_BUILD.package, GPU_BUILD.package} & set(locked) == {runtime.package}
    assert locked["numpy"].startswith("1."), "Triton's python backend needs numpy < 2"


def test_every_target_installs_the_lock_of_its_runtime() -> None:
    """bentofile.yaml installs the cpu lock (`bentoml build`, `build_bento.py`); the gpu targets share the gpu lock;
    `make lock` writes one lock per runtime extra."""
    bentofile = yaml.safe_load((ROOT / "bentofile.yaml").read_text())
    assert bentofile["python"]["requirements_txt"] == TARGET_BUILDS[Target.CPU].lock == CPU_BUILD.lock
    assert TARGET_BUILDS[Target.GPU] is TARGET_BUILDS[Target.GPU_TENSORRT] is GPU_BUILD
    assert makefile_setting("RUNTIMES").split() == ["cpu", "gpu"]
    assert "-o operations/container/requirements-$$runtime.lock" in (ROOT / "Makefile").read_text()
    assert {path.name for path in (ROOT / "operations" / "container").glob("*.lock")} == {
        Path(CPU_BUILD.lock).name, Path(GPU_BUILD.lock).name, Path(STAND_IN_LOCK).name
    }


def image_target() -> tuple[str, str]:
    """The base image's Python and glibc platform, as the Makefile's `lock` target resolves for them."""
    return makefile_setting("IMAGE_PYTHON"), makefile_setting("IMAGE_PLATFORM")


@RUNTIMES
def test_lock_was_resolved_for_the_python_of_the_base_image(runtime: OnnxRuntimeBuild) -> None:
    docker = yaml.safe_load((ROOT / "bentofile.yaml").read_text())["docker"]
    python, platform = image_target()
    assert docker["base_image"].startswith("nvcr.io/nvidia/tritonserver:")
    assert docker["python_version"] == python
    command = lock_text(runtime.lock).splitlines()[1]
    assert f" --extra {runtime.extra} --python-version {python} --python-platform {platform} " in command
    assert command.endswith(f" -o {runtime.lock}")
    assert docker["dockerfile_template"] == "operations/container/Dockerfile.template"


def test_the_stand_in_lock_keeps_the_cpu_locks_pins_but_those_its_platform_cannot_install() -> None:
    """The stand-in base has Debian 12's Python and glibc, not the real image's: its lock (make image
    BASE_IMAGE=stand-in) is the cpu lock resolved again for them, every pin kept but STAND_IN_UNPINNED's."""
    assert makefile_setting("STAND_IN_PYTHON") == STAND_IN_PYTHON
    cpu, stand_in = locked_versions(CPU_BUILD.lock), locked_versions(STAND_IN_LOCK)
    unpinned = set(makefile_setting("STAND_IN_UNPINNED").split())
    assert set(cpu) == set(stand_in)
    assert {name for name in cpu if cpu[name] != stand_in[name]} == unpinned
    command = lock_text(STAND_IN_LOCK).splitlines()[1]
    platform = makefile_setting("STAND_IN_PLATFORM")
    assert f" --extra cpu --python-version {STAND_IN_PYTHON} --python-platform {platform} " in command
    assert_resolves_to_itself(STAND_IN_LOCK, STAND_IN_PYTHON, platform)


def resolve_lock(lock: str, python: str, platform: str) -> subprocess.CompletedProcess[str]:
    """uv resolves `lock` again, wheels only, for `python` on `platform` (asks PyPI; about a second)."""
    return subprocess.run(
        [sys.executable, "-m", "uv", "pip", "compile", str(ROOT / lock), "--python-version", python,
         "--python-platform", platform, "--only-binary", ":all:", "--no-header", "--no-annotate",
         "--no-python-downloads"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def assert_resolves_to_itself(lock: str, python: str, platform: str) -> None:
    resolved = resolve_lock(lock, python, platform)
    assert resolved.returncode == 0, resolved.stderr
    assert {line for line in resolved.stdout.splitlines() if "==" in line} == {
        f"{name}=={version}" for name, version in locked_versions(lock).items()
    }


@RUNTIMES
def test_lock_resolves_to_itself_with_wheels_for_the_image(runtime: OnnxRuntimeBuild) -> None:
    assert_resolves_to_itself(runtime.lock, *image_target())


@RUNTIMES
@pytest.mark.parametrize(
    ("python", "missing"), [("3.10", "Python>=3.11"), ("3.13", "numpy")], ids=["py3.10-images-up-to-24.11", "py3.13"]
)
def test_lock_does_not_resolve_for_other_pythons(runtime: OnnxRuntimeBuild, python: str, missing: str) -> None:
    """Why the image's Python matters: the pins need 3.11 or newer (onnxruntime 1.31 too), numpy 1.26 has no 3.13 wheels."""
    resolved = resolve_lock(runtime.lock, python, image_target()[1])
    assert resolved.returncode != 0 and missing in resolved.stderr
