"""Service settings, read once from the environment at start-up; a bad value stops start-up naming it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class SettingsError(ValueError):
    """An environment variable holds a value the service cannot use."""


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise SettingsError(f"{name}={raw!r}: expected a positive integer")
    return value


@dataclass(frozen=True)
class Settings:
    model_repository: Path
    max_sequences_per_request: int

    @classmethod
    def from_environment(cls) -> Settings:
        return cls(
            model_repository=Path(os.environ.get("BIONEMO_MODEL_REPOSITORY", PROJECT_ROOT / "model_repository")),
            max_sequences_per_request=_positive_int("BIONEMO_MAX_SEQUENCES_PER_REQUEST", 64),
        )


SETTINGS = Settings.from_environment()
