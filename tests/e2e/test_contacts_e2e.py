"""/contacts on the real stack, held to transformers' `EsmModel.predict_contacts` of each sequence alone."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import requests
from support.service import RunningService
from support.reference import TransformersReference, proteins

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("model", ["esm1nv", "esm2nv"])
def test_contacts_equal_transformers_on_mixed_lengths(service: RunningService, model: str) -> None:
    sequences = proteins(np.random.default_rng(4), [1, 9, 60, 250]) + ["MKTXBUZO"]
    reply = service.answer("/contacts", {"model": model, "sequences": sequences})
    reference = TransformersReference(model)
    for sequence, contacts in zip(sequences, reply["contacts"]):
        expected = reference.contacts(sequence)
        assert np.array(contacts).shape == expected.shape == (len(sequence), len(sequence))
        np.testing.assert_allclose(contacts, expected, rtol=0, atol=1e-4)
        np.testing.assert_allclose(contacts, np.array(contacts).T, rtol=0, atol=1e-6)


def test_contacts_come_as_base64(service: RunningService) -> None:
    sequence = "MKTVRQERLKSIVRILERSKEPVSGAQLAEELSVSRQ"
    (encoded,) = service.answer("/contacts", {"sequences": [sequence], "encoding_format": "base64"})["contacts"]
    contacts = np.frombuffer(base64.b64decode(encoded), dtype="<f4").reshape(len(sequence), len(sequence))
    np.testing.assert_allclose(contacts, TransformersReference("esm2nv").contacts(sequence), rtol=0, atol=1e-4)


def test_models_without_a_contact_head_are_a_422(service: RunningService) -> None:
    listed = {m["name"]: m["capabilities"] for m in requests.get(f"{service.url}/models", timeout=30).json()["models"]}
    assert [name for name, capabilities in sorted(listed.items()) if "contacts" in capabilities] == ["esm1nv", "esm2nv"]
    response = requests.post(f"{service.url}/contacts", json={"model": "prott5nv", "sequences": ["MKT"]}, timeout=60)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["message"] == (
        "prott5nv cannot contacts; models that can: esm1nv, esm2nv"
    )
