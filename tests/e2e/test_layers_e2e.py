"""/embed's and /hidden's `layers` on the real stack, held to transformers' `output_hidden_states` of each sequence alone."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import requests
from support.service import RunningService
from support.reference import TransformersReference

from bionemo_serving.model_catalog import MODELS

pytestmark = pytest.mark.e2e

INPUTS = {
    "esm1nv": ["MKTVRQERLKSIVRILERSKEPVSGAQLAEELSVSRQ", "MK", "ACDEFGHIKLMNPQRSTVWYXBUZO"],
    "esm2nv": ["MKTVRQERLKSIVRILERSKEPVSGAQLAEELSVSRQ", "MK", "ACDEFGHIKLMNPQRSTVWYXBUZO"],
    "prott5nv": ["MKTVRQERLKSIVRILERSKEPVSGAQLAEELSVSRQ", "MK", "ACDEFGHIKLMNPQRSTVWYXBUZO"],
    "megamolbart": ["CC(=O)Nc1ccc(O)cc1", "C", "c1ccccc1O"],
}


@pytest.mark.parametrize("model", list(INPUTS))
def test_every_layer_equals_transformers_output_hidden_states(service: RunningService, model: str) -> None:
    sequences, reference = INPUTS[model], TransformersReference(model)
    expected = [reference.every_layer(sequence) for sequence in sequences]
    count = len(expected[0])
    every = list(range(count))
    hidden = service.answer("/hidden", {"model": model, "sequences": sequences, "layers": every})
    assert hidden["layers"] == every
    hiddens, mask = np.array(hidden["hiddens"]), np.array(hidden["mask"])
    assert hiddens.shape[:2] == (len(sequences), count)
    for row, layers in enumerate(expected):
        tokens = layers.shape[1]
        np.testing.assert_allclose(hiddens[row, :, :tokens], layers, rtol=0, atol=1e-4)
        assert mask[row].sum() == tokens and not hiddens[row, :, tokens:].any()
    # Negative indices count from the end; the last layer is what /hidden answers without `layers`.
    asked = [-1, 0, -count]
    embedded = service.answer("/embed", {"model": model, "sequences": sequences, "layers": asked})
    assert embedded["layers"] == [count - 1, 0, 0]
    assert embedded["dim"] == len(embedded["embeddings"][0][0])  # each vector's length, not the layers'
    residues = reference.residues
    for row, layers in enumerate(expected):
        means = layers[:, residues].mean(axis=1)
        np.testing.assert_allclose(embedded["embeddings"][row], means[[count - 1, 0, 0]], rtol=0, atol=1e-4)
    array = requests.post(
        f"{service.url}/embed/ndarray", json={"model": model, "sequences": sequences, "layers": asked}
    )
    np.testing.assert_allclose(array.json(), embedded["embeddings"], rtol=0, atol=1e-6)
    plain = service.answer("/embed", {"model": model, "sequences": sequences})
    np.testing.assert_allclose(np.array(embedded["embeddings"])[:, 0], plain["embeddings"], rtol=0, atol=1e-5)
    assert plain["layers"] is None


def test_pooling_normalization_and_base64_apply_per_layer(service: RunningService) -> None:
    sequences, reference = INPUTS["esm2nv"], TransformersReference("esm2nv")
    body = {"sequences": sequences, "layers": [2, -1], "pooling": "cls", "normalize": True, "encoding_format": "base64"}
    embedded = service.answer("/embed", body)
    for sequence, encoded in zip(sequences, embedded["embeddings"]):
        vectors = np.frombuffer(base64.b64decode(encoded), dtype="<f4").reshape(2, -1)
        at_cls = reference.every_layer(sequence)[[2, -1], 0]
        np.testing.assert_allclose(vectors, at_cls / np.linalg.norm(at_cls, axis=1, keepdims=True), rtol=0, atol=1e-4)
    body = {"sequences": sequences, "layers": [1], "encoding_format": "base64", "dtype": "float16"}
    hidden = service.answer("/hidden", body)
    width = len(hidden["mask"][0])
    for sequence, encoded in zip(sequences, hidden["hiddens"]):
        states = np.frombuffer(base64.b64decode(encoded), dtype="<f2").reshape(1, width, -1)
        expected = reference.every_layer(sequence)[1]
        np.testing.assert_allclose(states[0, : len(expected)], expected, rtol=1e-3, atol=1e-2)


def test_a_layer_out_of_range_is_a_422_naming_it(service: RunningService) -> None:
    count = MODELS["esm2nv"].default_checkpoint_config["num_hidden_layers"] + 1
    response = requests.post(
        f"{service.url}/hidden", json={"sequences": ["MKT"], "layers": [1, count, -count - 1]}, timeout=60
    )
    assert response.status_code == 422, response.text
    details = response.json()["error"]["details"]
    assert [detail["field"] for detail in details] == ["layers[1]", "layers[2]"]
    assert details[0]["message"] == (
        f"esm2nv has hidden states 0 (the embedding layer's output) to {count - 1} (its last layer's), or -{count} to -1 "
        f"counting from the end; not {count}"
    )
    for layers in ([], [1.5], [True]):
        response = requests.post(f"{service.url}/embed", json={"sequences": ["MKT"], "layers": layers}, timeout=60)
        assert response.status_code == 422 and response.json()["error"]["details"][0]["field"].startswith("layers")
    listed = requests.get(f"{service.url}/models", timeout=30).json()["models"]
    assert all("layers" in model["capabilities"] for model in listed)
