"""The suite's layers, one folder each, marked by their folder: unit/ (the engine, validation and tools, with a fake
runner and tiny checkpoints; no test there exports a model, starts a server or carries the e2e mark), e2e/ (the real
stack, and whatever exports a model or reads the default export) and container/ (the image). And its shared fixtures:
the real stack (`bentoml serve` with the real tritonserver behind it), the tiny models the exporter's and the runtimes'
tests export once, and what more than one test module asks of the stack. What they are built from lives in
tests/support/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.bentoml_clients import MOLECULES, through_curl
from support.checkpoints import TinyModels
from support.image_build import ImageBuild
from support.service import RunningService, start_launcher, stop_service

from operations.container.engine import missing_tools


@pytest.fixture(scope="session")
def service() -> Iterator[RunningService]:
    """The default models, served as `make serve` serves them, for every test that changes nothing of the service."""
    running = start_launcher()
    yield running
    stop_service(running)


@pytest.fixture(scope="module")
def molecule_hiddens(service: RunningService) -> dict[str, Any]:
    """/hidden of two SMILES of different lengths: the input of the decoders (the shorter one padded), for both of
    BentoML's clients' tests."""
    response = through_curl(service, "hidden", {"model": "megamolbart", "sequences": MOLECULES})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """Tiny checkpoints of each architecture and their exports, each made once a session, on first use."""
    return TinyModels(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session", autouse=True)
def image_build(request: pytest.FixtureRequest) -> Iterator[ImageBuild | None]:
    """The image's build, started with the session where a test of this session runs the image (and the tools to
    build it are here: that test says which are missing); None otherwise."""
    if missing_tools() or not any("image" in item.fixturenames for item in request.session.items):
        yield None
        return
    build = ImageBuild()
    yield build
    build.stop()


LAYER_MARKS = {"e2e": ("e2e",), "container": ("e2e", "container")}
"""The marks every test of a layer's folder carries, so that `-m "not e2e and not container"` is the unit layer."""
LAYER_ORDER = ("unit", "e2e", "container")
"""The order the layers run in: the fast one first, the image's last, so that the image's build (started with the
session, minutes from nothing) runs while the others do, not before them (pytest would take the folders
alphabetically)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for mark in LAYER_MARKS.get(item.path.parent.name, ()):
            item.add_marker(mark)
    layer = {name: index for index, name in enumerate(LAYER_ORDER)}
    items.sort(key=lambda item: layer.get(item.path.parent.name, len(LAYER_ORDER)))  # stable: each layer's order kept
