"""The settings' Triton arguments where they read the default export: the graphs an admin token has Triton load with
a model are those the export holds. The settings without an export are tests/unit/test_settings.py's."""

from __future__ import annotations

from bionemo_serving.startup.command_lines import triton_arguments
from bionemo_serving.startup.settings import Settings
from support.settings import ADMIN_TOKEN


def test_an_admin_token_gives_triton_explicit_model_control_over_every_model() -> None:
    """e2e: the graphs loaded with a model are those the default export holds (its heads are optional)."""
    settings = Settings.from_environment({"BIONEMO_ADMIN_TOKEN": ADMIN_TOKEN})
    assert triton_arguments(settings) == ["--allow-metrics=false", "--exit-on-error=false", "--model-control-mode=explicit", "--load-model=*"]
    chosen = Settings.from_environment({"BIONEMO_ADMIN_TOKEN": ADMIN_TOKEN, "BIONEMO_MODELS": "esm2nv"})
    assert triton_arguments(chosen) == [
        "--allow-metrics=false", "--exit-on-error=false", "--model-control-mode=explicit", "--load-model=esm2nv",
        "--load-model=esm2nv_language_model", "--load-model=esm2nv_layers", "--load-model=esm2nv_contacts",
    ]  # fmt: skip
    assert ADMIN_TOKEN not in repr(settings)
