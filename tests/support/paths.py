"""Where the tests find the project and its default export (`make models` writes both folders; git holds neither)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REPOSITORY = ROOT / "model_repository"
CHECKPOINTS = ROOT / "checkpoints"
"""The default models' checkpoints, one folder per model: what the default repository was exported from."""
CLIENT_VENV = ROOT / ".venv-client"
"""The client package's own environment (`make test-client` creates it): no server package is installed there."""
