"""A request for a capability a model lacks is a 422 naming the models that have it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tritonclient.grpc import model_config_pb2

from bionemo_serving.model_catalog import MODELS, Capability, GraphRole
from bionemo_serving.errors import CapabilityNotSupported, UnknownModel, http_status
from bionemo_serving.triton.models import ServedModel, TritonGraph
from bionemo_serving.triton.registry import select_model

LACKS_HEAD = "its checkpoint has no head for it (the model repository has no esm_language_model)"


def served(name: str, catalogued: str, roles: set[GraphRole]) -> ServedModel:
    """A served model with the graphs of `roles` loaded, and why each other optional graph is not."""
    description = replace(MODELS[catalogued], name=name)
    graphs = {
        role: TritonGraph(f"{name}_{role.value}", description.graph(role), (), 8, model_config_pb2.ModelConfig())
        for role in roles
    }
    unserved = {graph.role: LACKS_HEAD for graph in description.graphs if graph.role not in roles}
    return ServedModel(description, (1, 2), graphs, {"hidden_size": 8}, 2, unserved)


def test_missing_capability_names_the_models_that_have_it() -> None:
    models = {
        "embedder": served("embedder", "prott5nv", {GraphRole.ENCODER}),
        "generator": served("generator", "megamolbart", {GraphRole.ENCODER, GraphRole.DECODER}),
    }
    with pytest.raises(CapabilityNotSupported, match="embedder cannot generate; models that can: generator") as raised:
        select_model(models, "embedder", Capability.GENERATE)
    assert http_status(raised.value) == 422 and raised.value.problems[0].field == "model"
    assert select_model(models, "generator", Capability.GENERATE).name == "generator"
    with pytest.raises(UnknownModel, match="served models: embedder, generator"):
        select_model(models, "esm9", Capability.EMBED)


def test_a_model_served_without_its_head_says_what_it_lacks() -> None:
    models = {
        "bare": served("bare", "esm2nv", {GraphRole.ENCODER}),
        "whole": served("whole", "esm2nv", {GraphRole.ENCODER, GraphRole.LANGUAGE_MODEL}),
    }
    assert models["bare"].capabilities == {Capability.EMBED, Capability.HIDDEN}
    assert models["whole"].capabilities == {Capability.EMBED, Capability.HIDDEN, Capability.LOGITS, Capability.SCORE}
    with pytest.raises(CapabilityNotSupported) as raised:
        select_model(models, "bare", Capability.SCORE)
    assert str(raised.value) == f"model: bare cannot score: {LACKS_HEAD}; models that can: whole"


def test_a_request_picks_a_served_version_or_gets_the_newest() -> None:
    models = {"both": served("both", "esm2nv", {GraphRole.ENCODER})}
    assert select_model(models, "both", Capability.EMBED).version == 2
    assert select_model(models, "both", Capability.EMBED, version=1).version == 1
    with pytest.raises(UnknownModel, match="both version 3 is not served; versions: 1, 2") as raised:
        select_model(models, "both", Capability.EMBED, version=3)
    assert http_status(raised.value) == 422 and raised.value.problems[0].field == "model_version"
