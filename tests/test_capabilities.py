"""A request for a capability a model lacks is a 422 naming the models that have it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from model_catalog import MODELS, Capability
from serving.errors import CapabilityNotSupported, UnknownModel, http_status
from serving.triton.registry import select_model
from serving.triton.models import ServedModel


def served(name: str, capabilities: set[Capability]) -> ServedModel:
    description = replace(MODELS["esm2nv"], name=name, capabilities=frozenset(capabilities))
    return ServedModel(description, versions=(1, 2), graphs={}, sizes={"hidden_size": 8}, version=2)


def test_missing_capability_names_the_models_that_have_it() -> None:
    models = {
        "embedder": served("embedder", {Capability.EMBED}),
        "both": served("both", {Capability.EMBED, Capability.HIDDEN}),
    }
    with pytest.raises(CapabilityNotSupported, match="embedder cannot hidden; models that can: both") as raised:
        select_model(models, "embedder", Capability.HIDDEN)
    assert http_status(raised.value) == 422 and raised.value.problems[0].field == "model"
    assert select_model(models, "both", Capability.HIDDEN).name == "both"
    with pytest.raises(UnknownModel, match="served models: both, embedder"):
        select_model(models, "esm9", Capability.EMBED)


def test_a_request_picks_a_served_version_or_gets_the_newest() -> None:
    models = {"both": served("both", {Capability.EMBED})}
    assert select_model(models, "both", Capability.EMBED).version == 2
    assert select_model(models, "both", Capability.EMBED, version=1).version == 1
    with pytest.raises(UnknownModel, match="both version 3 is not served; versions: 1, 2") as raised:
        select_model(models, "both", Capability.EMBED, version=3)
    assert http_status(raised.value) == 422 and raised.value.problems[0].field == "model_version"
