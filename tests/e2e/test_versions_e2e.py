"""Two versions of a model side by side: the config keeps both, each request picks one, through the real stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests

from bionemo_serving.exporter import export_model
from bionemo_serving.model_catalog import ENCODER
from support.checkpoints import tiny, write_tiny_checkpoint
from support.reference import TransformersReference
from support.service import RunningService, start_launcher, stop_service

pytestmark = pytest.mark.e2e

SEQUENCE = "MKTVRQERLKSIVRILERSKEPVSGAQLAEELSVSRQVIVQDIAYLRSLGYNIVATPRGYVLAGG"
TWO_VERSIONS = tiny("esm2nv", versions_served=2, graphs=(ENCODER,))
"""The heads, optional, are versioned the same way; exporting them twice took 36 s here."""


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Versions 1 and 2 of esm2nv from two different random checkpoints, in a repository of their own."""
    root = tmp_path_factory.mktemp("versions")
    folders = {}
    for version in (1, 2):
        folders[version] = root / f"checkpoint-{version}"
        write_tiny_checkpoint("esm2nv", folders[version], seed=version)
        # The ONNX file alone: versions are the service's, every runtime's parity test_runtimes_e2e's.
        export_model(TWO_VERSIONS, folders[version], root / "repository", version=version, runtimes=())
    return folders


@pytest.fixture(scope="module")
def versioned_service(checkpoints: dict[int, Path]) -> Iterator[RunningService]:
    repository = checkpoints[1].parent / "repository"
    running = start_launcher({"BIONEMO_MODEL_REPOSITORY": str(repository)})
    yield running
    stop_service(running)


def embed(service: RunningService, **fields: object) -> requests.Response:
    return requests.post(f"{service.url}/embed", json={"model": "esm2nv", "sequences": [SEQUENCE], **fields}, timeout=60)


def test_models_lists_every_served_version(versioned_service: RunningService) -> None:
    (model,) = requests.get(f"{versioned_service.url}/models", timeout=30).json()["models"]
    assert (model["name"], model["version"], model["versions"]) == ("esm2nv", 2, [1, 2])


@pytest.mark.parametrize("requested", [None, 1, 2])
def test_each_version_answers_with_its_own_weights(
    versioned_service: RunningService, checkpoints: dict[int, Path], requested: int | None
) -> None:
    fields = {} if requested is None else {"model_version": requested}
    response = embed(versioned_service, **fields)
    assert response.status_code == 200, response.text
    version = requested or 2  # no version: the newest
    assert response.json()["model_version"] == version
    expected = TransformersReference("esm2nv", checkpoints[version]).mean_embedding(SEQUENCE)
    other = TransformersReference("esm2nv", checkpoints[3 - version]).mean_embedding(SEQUENCE)
    got = np.asarray(response.json()["embeddings"][0])
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert np.abs(got - other).max() > 1e-2  # the two versions really differ


@pytest.mark.parametrize(
    ("version", "message"),
    [(3, "esm2nv version 3 is not served; versions: 1, 2"), (0, "greater than or equal to 1")],
)
def test_a_version_not_served_is_a_422_naming_the_field(versioned_service: RunningService, version: int, message: str) -> None:
    response = embed(versioned_service, model_version=version)
    assert response.status_code == 422
    (detail,) = response.json()["error"]["details"]
    assert detail["field"] == "model_version" and message in detail["message"]
    assert embed(versioned_service).status_code == 200
