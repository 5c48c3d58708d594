"""Bad input against the real stack: a 4xx in one JSON shape naming the field and item, and the server stays healthy.

The table of bad bodies on every route runs in-process, through the same descriptors, routes and engine, in
tests/unit/test_validation.py; here one of each kind goes through BentoML's HTTP server, the real tokenizer path and Triton:
a body that is not JSON, one the schema refuses, one the tokenizer refuses, the 415 and the 413 both ways.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from support.service import RunningService

pytestmark = pytest.mark.e2e

BAD_INPUTS = [
    pytest.param("/embed", b"{not json", 400, "body", "not valid JSON", id="not-json"),
    pytest.param("/hidden", {"sequences": ["MKT", 5]}, 422, "sequences[1]", "valid string", id="schema"),
    pytest.param("/embed/ndarray", {"sequences": ["MKT", "MKJL"]}, 422, "sequences[1]", "'J' at", id="tokenizer"),
]


def assert_healthy(service: RunningService, path: str) -> None:
    healthy = requests.post(f"{service.url}{path}", json={"sequences": ["MKT"]}, timeout=60)
    assert healthy.status_code == 200, healthy.text


@pytest.mark.parametrize(("path", "body", "status", "field", "message"), BAD_INPUTS)
def test_bad_input(service: RunningService, path: str, body: Any, status: int, field: str, message: str) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = requests.post(f"{service.url}{path}", data=raw, headers={"content-type": "application/json"}, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert any(d["field"] == field and message in d["message"] for d in error["details"]), error
    assert_healthy(service, path)


def test_wrong_content_type_is_415(service: RunningService) -> None:
    response = requests.post(f"{service.url}/embed", data={"sequences": "MKT"}, timeout=60)
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
    assert_healthy(service, "/embed")
