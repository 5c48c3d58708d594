"""What the tests of BentoML's clients (the old `bentoml.client` and 1.4's `SyncHTTPClient`/`AsyncHTTPClient`) share:
the APIs each client must offer, the requests they send, and curl's answer to hold each client's to."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from support.service import RunningService

PUBLIC_APIS = {
    "embed", "embed_ndarray", "hidden", "logits", "score", "contacts", "decode", "decode_ndarray", "generate", "models",
    "openai_embeddings", "openai_models", "embed_dataframe", "molmim_embedding", "molmim_hidden", "molmim_decode",
    "molmim_sampling", "molmim_generate",
}  # fmt: skip
PROTEIN = "esm2nv"
MOLECULES = ["CCO", "c1ccccc1C(=O)O"]
BAD_REQUESTS = [
    pytest.param("embed", {"sequences": ["MKT"], "model": "esm9"}, "model", id="unknown-model"),
    pytest.param("hidden", {"sequences": ["MKT", "MKJL"]}, "sequences[1]", id="bad-residue"),
    pytest.param("score", {"sequence": "MKT", "mutations": ["K2R", "A1G"]}, "mutations[1]", id="bad-mutation"),
]


def through_curl(service: RunningService, route: str, body: Any) -> requests.Response:
    """The same request as a plain JSON POST: the answer a client's must equal."""
    return requests.post(f"{service.url}/{route}", json=body, timeout=120)
