"""A start with a forced runtime, on the default repository the suite's shared service serves, serves its choice from
a folder of its own and leaves the repository's configs as they were (issue 37). The served folders themselves, over
repositories of a test's own, are tests/unit/test_served_repository.py's."""

from __future__ import annotations

from pathlib import Path

from bionemo_serving.runtimes.engines import Runtime
from bionemo_serving.runtimes.served_repository import PREFIX
from bionemo_serving.startup.launch import served_with_chosen_runtimes
from bionemo_serving.startup.settings import Settings
from support.paths import DEFAULT_REPOSITORY
from support.repositories import runtime_named


def test_a_start_with_a_forced_runtime_leaves_the_default_repository_as_it_was() -> None:
    """What the launcher does before `bentoml serve`, on the repository the suite's shared service serves."""
    configs = {path: path.read_text() for path in DEFAULT_REPOSITORY.glob("*/config.pbtxt")}
    settings = Settings.from_environment(
        {"BIONEMO_MODEL_REPOSITORY": str(DEFAULT_REPOSITORY), "BIONEMO_MODELS": "esm2nv", "BIONEMO_RUNTIME": "openvino"}
    )
    served = Path(served_with_chosen_runtimes(settings))
    assert served.parent != DEFAULT_REPOSITORY and served.name.startswith(PREFIX)
    assert runtime_named(served / "esm2nv" / "config.pbtxt") == Runtime.OPENVINO.value
    assert {path: path.read_text() for path in DEFAULT_REPOSITORY.glob("*/config.pbtxt")} == configs
    assert not any('key: "runtime"' in text for text in configs.values()), "a start wrote its choice into the repository"
