"""The suite's shared fixtures: the real stack (`bentoml serve` with the real tritonserver behind it) and the tiny
models the exporter's and the runtimes' tests export once. What they are built from lives in tests/support/."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.checkpoints import TinyModels
from support.service import RunningService, start_launcher, stop_service


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
