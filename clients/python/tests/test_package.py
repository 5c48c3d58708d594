"""The client's environment holds none of the server's packages."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.mark.parametrize("server_package", ["bentoml", "tritonclient", "torch", "onnxruntime", "rdkit"])
def test_no_server_package_is_installed(server_package: str) -> None:
    assert importlib.util.find_spec(server_package) is None, f"{server_package} is installed beside the client"
