"""The HTTP layer: 429, 503 and 504 retried after Retry-After, other refusals raised with the service's details; every
request names its client."""

from __future__ import annotations

import time

import pytest

from bionemo_client.service import Problem, Service, ServiceError, default_client_id


def test_429_503_and_504_are_retried_after_retry_after(stand_in) -> None:
    stand_in.refuse_first = [(503, {"Retry-After": "1"}), (429, {"Retry-After": "0"}), (504, {"Retry-After": "0"})]
    with Service(stand_in.url) as service:
        started = time.monotonic()
        answer = service.post("/embed", {"model": "esm2nv", "sequences": ["MKT"]})
        waited = time.monotonic() - started
    assert answer["dim"] == 8 and len(stand_in.bodies) == 4
    assert 1.0 <= waited < 3.0, waited
    assert str(service.retried) == "1 x 429, 1 x 503, 1 x 504"


def test_every_request_names_its_client(stand_in) -> None:
    with Service(stand_in.url, client_id="team-a") as service:
        service.post("/embed", {"model": "esm2nv", "sequences": ["MKT"]})
    with Service(stand_in.url) as service:
        service.post("/embed", {"model": "esm2nv", "sequences": ["MKT"]})
    assert stand_in.client_ids[0] == "team-a"
    assert stand_in.client_ids[1] == default_client_id() and default_client_id().startswith("bionemo-client:")


def test_retries_run_out_into_an_error(stand_in) -> None:
    stand_in.refuse_first = [(503, {"Retry-After": "0"})] * 3
    with Service(stand_in.url, retries=2) as service, pytest.raises(ServiceError, match="HTTP 503 overloaded"):
        service.post("/embed", {"model": "esm2nv", "sequences": ["MKT"]})


def test_a_refusal_carries_the_fields_at_fault(stand_in) -> None:
    with Service(stand_in.url) as service, pytest.raises(ServiceError) as refused:
        service.post("/embed", {"model": "esm2nv", "sequences": ["MKT", "MJK"]})
    assert refused.value.status == 422 and refused.value.refuses_the_input
    assert refused.value.problems == [Problem("sequences[1]", "'J' is not an amino acid")]
    assert refused.value.problems[0].item("sequences") == 1 and refused.value.problems[0].item("smiles") is None


def test_an_unreachable_service_is_an_error_after_the_retries() -> None:
    with Service("http://127.0.0.1:9", retries=1) as service, pytest.raises(ServiceError, match="unreachable"):
        service.get("/models")
