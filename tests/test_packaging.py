"""The bento installs exactly the run-time dependencies pinned in pyproject.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_bento_packages_are_the_pinned_runtime_dependencies() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    bentofile = yaml.safe_load((ROOT / "bentofile.yaml").read_text())
    assert bentofile["python"]["packages"] == pyproject["project"]["dependencies"]
    assert all("==" in requirement for requirement in bentofile["python"]["packages"])


def test_bento_service_and_base_image() -> None:
    bentofile = yaml.safe_load((ROOT / "bentofile.yaml").read_text())
    assert bentofile["service"] == "service:svc"
    assert bentofile["docker"]["base_image"].startswith("nvcr.io/nvidia/tritonserver:")
