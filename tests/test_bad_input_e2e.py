"""Bad input on every endpoint: a 4xx in one JSON shape naming the field and item, and the server stays healthy."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from conftest import RunningService
from model_catalog import MODELS

ESM2_LIMIT = MODELS["esm2nv"].max_length
ENDPOINTS = ["/embed", "/embed/ndarray", "/hidden"]

BAD_INPUTS = [
    pytest.param(b"{not json", 400, "body", "not valid JSON", id="not-json"),
    pytest.param({}, 422, "sequences", "Field required", id="missing-field"),
    pytest.param({"sequences": []}, 422, "sequences", "at least 1 item", id="empty-list"),
    pytest.param({"sequences": "MKT"}, 422, "sequences", "valid array", id="string-not-list"),
    pytest.param({"sequences": ["MKT", 5]}, 422, "sequences[1]", "valid string", id="number-in-list"),
    pytest.param({"sequences": ["MKT", ""]}, 422, "sequences[1]", "sequence is empty", id="empty-sequence"),
    pytest.param({"sequences": ["MKT", "MKJL"]}, 422, "sequences[1]", "character 'J' at position 2", id="bad-char"),
    pytest.param(
        {"sequences": ["A" * (ESM2_LIMIT + 1)]}, 422, "sequences[0]", f"at most {ESM2_LIMIT} (or send \"truncate\": true)",
        id="too-long",
    ),
    pytest.param({"sequences": ["MKT"], "truncate": "yes"}, 422, "truncate", "valid boolean", id="bad-truncate"),
    pytest.param(
        {"sequences": ["A" * ESM2_LIMIT + "J"], "truncate": True}, 422, "sequences[0]", f"'J' at position {ESM2_LIMIT}",
        id="truncate-checks-the-whole-sequence",
    ),
    pytest.param({"sequences": ["A" * 511], "model": "esm1nv"}, 422, "sequences[0]", "at most 510", id="too-long-esm1"),
    pytest.param(
        {"sequences": ["MKT"] * 65}, 422, "sequences",
        "has 65 items; at most 64 in one request (BIONEMO_MAX_SEQUENCES_PER_REQUEST)", id="too-many",
    ),
    pytest.param({"sequences": ["MKT"], "model": "esm9"}, 422, "model", "'esm9' is not served", id="unknown-model"),
    pytest.param({"sequences": ["MKT"], "model": 3}, 422, "model", "valid string", id="model-not-string"),
    # Names and versions are looked up among the models Triton serves, never joined into a path.
    pytest.param({"sequences": ["MKT"], "model": "../esm2nv"}, 422, "model", "is not served", id="model-path"),
    pytest.param({"sequences": ["MKT"], "model_version": "../1"}, 422, "model_version", "valid integer", id="version-path"),
    pytest.param({"sequences": ["MKT"], "colour": "red"}, 422, "colour", "Extra inputs", id="unknown-field"),
    pytest.param([["MKT"]], 422, "body", "should be an object", id="list-body"),
]
EMBED_ONLY = [
    pytest.param({"sequences": ["MKT"], "pooling": "max"}, 422, "pooling", "'mean' or 'cls'", id="bad-pooling"),
    pytest.param({"sequences": ["MKT"], "pooling": "cls", "model": "prott5nv"}, 422, "pooling", "no <cls>", id="no-cls"),
    pytest.param({"sequences": ["MKT"], "normalize": "yes"}, 422, "normalize", "valid boolean", id="bad-normalize"),
]


def assert_rejected(service: RunningService, path: str, body: Any, status: int, field: str, message: str) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = requests.post(f"{service.url}{path}", data=raw, headers={"content-type": "application/json"}, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert any(d["field"] == field and message in d["message"] for d in error["details"]), error
    healthy = requests.post(f"{service.url}{path}", json={"sequences": ["MKT"]}, timeout=60)
    assert healthy.status_code == 200, healthy.text


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(("body", "status", "field", "message"), BAD_INPUTS)
def test_bad_input(service: RunningService, path: str, body: Any, status: int, field: str, message: str) -> None:
    assert_rejected(service, path, body, status, field, message)


@pytest.mark.parametrize("path", ["/embed", "/embed/ndarray"])
@pytest.mark.parametrize(("body", "status", "field", "message"), EMBED_ONLY)
def test_bad_embed_options(service: RunningService, path: str, body: Any, status: int, field: str, message: str) -> None:
    assert_rejected(service, path, body, status, field, message)


def test_every_bad_sequence_is_reported(service: RunningService) -> None:
    response = requests.post(f"{service.url}/embed", json={"sequences": ["MKT", "", "MK1"]}, timeout=60)
    assert response.status_code == 422
    assert [d["field"] for d in response.json()["error"]["details"]] == ["sequences[1]", "sequences[2]"]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_wrong_content_type_is_415(service: RunningService, path: str) -> None:
    response = requests.post(f"{service.url}{path}", data={"sequences": "MKT"}, timeout=60)
    assert response.status_code == 415
    assert response.json()["error"]["details"][0]["field"] == "content-type"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_size_limit_is_413_and_the_server_stays_healthy(service: RunningService, chunked: bool) -> None:
    """Over BIONEMO_MAX_REQUEST_BYTES (32 MiB by default): refused whether the client declares its length or not."""
    body = json.dumps({"sequences": ["M" * (33 * 2**20)]}).encode()
    data = (body[start : start + 2**20] for start in range(0, len(body), 2**20)) if chunked else body
    response = requests.post(f"{service.url}/embed", data=data, headers={"content-type": "application/json"}, timeout=120)
    assert response.status_code == 413, response.text[:500]
    error = response.json()["error"]
    assert error["type"] == "payload_too_large" and error["details"][0]["field"] == "body"
    assert "33,554,432 bytes" in error["message"]
    healthy = requests.post(f"{service.url}/embed", json={"sequences": ["MKT"]}, timeout=60)
    assert healthy.status_code == 200, healthy.text
