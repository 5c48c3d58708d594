"""The suite's shared fixtures: the real stack (`bentoml serve` with the real tritonserver behind it) and the tiny
models the exporter's and the runtimes' tests export once. What they are built from lives in tests/support/."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.checkpoints import TinyModels
from support.service import RunningService, start_launcher, stop_service


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for the shared service runs the real stack: it is e2e whether or not its module says so, so
    that the fast layer (`-m "not e2e and not container"`, deselected after this hook) never starts one."""
    for item in items:
        if "service" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def service() -> Iterator[RunningService]:
    """The default models, served as `make serve` serves them, for every test that changes nothing of the service."""
    running = start_launcher()
    yield running
    stop_service(running)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """Tiny checkpoints of each architecture and their exports, each made once a session, on first use."""
    return TinyModels(tmp_path_factory.mktemp("tiny-models"))
