"""The bento's lock holds exactly the run-time pins of pyproject.toml, resolved for the image's Python."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "container" / "requirements.lock"


def locked_versions() -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", LOCK.read_text(), re.MULTILINE)
    return {name.lower().replace("_", "-"): version for name, version in pins}


def test_lock_pins_every_runtime_dependency_at_its_pyproject_version() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    locked = locked_versions()
    for requirement in dependencies:
        name, version = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", requirement).groups()
        assert locked.get(name.lower()) == version, requirement
    assert locked["numpy"].startswith("1."), "Triton's python backend needs numpy < 2"


def image_target() -> tuple[str, str]:
    """The base image's Python and glibc platform, as the Makefile's `lock` target resolves for them."""
    makefile = (ROOT / "Makefile").read_text()
    python = re.search(r"^IMAGE_PYTHON := (\S+)$", makefile, re.MULTILINE).group(1)
    platform = re.search(r"^IMAGE_PLATFORM := (\S+)$", makefile, re.MULTILINE).group(1)
    return python, platform


def test_lock_was_resolved_for_the_python_of_the_base_image() -> None:
    docker = yaml.safe_load((ROOT / "bentofile.yaml").read_text())["docker"]
    python, platform = image_target()
    assert docker["base_image"].startswith("nvcr.io/nvidia/tritonserver:")
    assert docker["python_version"] == python
    assert f"--python-version {python} --python-platform {platform} " in LOCK.read_text().splitlines()[1]
    assert docker["dockerfile_template"] == "container/Dockerfile.template"


def resolve_lock(python: str, platform: str) -> subprocess.CompletedProcess[str]:
    """uv resolves the lock again, wheels only, for `python` on `platform` (asks PyPI; about a second)."""
    return subprocess.run(
        [sys.executable, "-m", "uv", "pip", "compile", str(LOCK), "--python-version", python, "--python-platform",
         platform, "--only-binary", ":all:", "--no-header", "--no-annotate", "--no-python-downloads"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_lock_resolves_to_itself_with_wheels_for_the_image() -> None:
    resolved = resolve_lock(*image_target())
    assert resolved.returncode == 0, resolved.stderr
    assert {line for line in resolved.stdout.splitlines() if "==" in line} == {
        f"{name}=={version}" for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", LOCK.read_text(), re.MULTILINE)
    }


@pytest.mark.parametrize(
    ("python", "missing"), [("3.10", "Python>=3.11"), ("3.13", "numpy")], ids=["py3.10-images-up-to-24.11", "py3.13"]
)
def test_lock_does_not_resolve_for_other_pythons(python: str, missing: str) -> None:
    """Why the image's Python matters: the pins need 3.11 or newer (onnxruntime 1.31 too), numpy 1.26 has no 3.13 wheels."""
    resolved = resolve_lock(python, image_target()[1])
    assert resolved.returncode != 0 and missing in resolved.stderr
