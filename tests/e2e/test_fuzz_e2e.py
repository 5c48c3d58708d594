"""Fuzzing every endpoint from the service's own OpenAPI document with schemathesis: no input gets a 500.

A bounded number of examples per operation (`FUZZ_EXAMPLES`, derandomized, so CI
runs the same ones); the service under fuzz has a 5 s request timeout, so that a
valid but huge request (64 seeds x 64 samples x 16 beams) ends as a 504 instead
of holding the run. The admin endpoints are on, and fuzzed with the token (without it, every input would be a
401 before its body is read); they come last, and may unload models the others then answer with 422s. The OpenAI
dialect's routes (/v1/...) answer errors in OpenAI's shape.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings

from support.service import RunningService, start_launcher, stop_service

pytestmark = pytest.mark.e2e

FUZZ_EXAMPLES = 40
ADMIN = {"Authorization": f"Bearer {secrets.token_hex(32)}"}


def error_keys(path: str) -> set[str]:
    """The service's one error shape; OpenAI's under /v1 (bionemo_serving/fronts/openai/routes.py)."""
    return {"message", "type", "param", "code"} if path.startswith("/v1/") else {"type", "message", "details"}


@pytest.fixture(scope="module")
def fuzzed_service() -> Iterator[RunningService]:
    running = start_launcher(
        {"BIONEMO_REQUEST_TIMEOUT_S": "5", "BIONEMO_ADMIN_TOKEN": ADMIN["Authorization"].removeprefix("Bearer ")}
    )
    yield running
    stop_service(running)


@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode), ids=lambda mode: mode.value)
def test_no_generated_input_gets_a_500(fuzzed_service: RunningService, mode: schemathesis.GenerationMode) -> None:
    """Each operation of the OpenAPI document in turn, with inputs that follow the schema (positive) and inputs
    that break it (negative); through hypothesis directly, as schemathesis' pytest plugin does not run under this
    pytest."""
    document = schemathesis.openapi.from_url(f"{fuzzed_service.url}/docs.json")
    operations = [result.ok() for result in document.get_all_operations()]
    assert {operation.path for operation in operations} >= {
        "/embed", "/hidden", "/decode", "/generate", "/models", "/admin/load", "/v1/embeddings", "/v1/models"
    }
    if mode is schemathesis.GenerationMode.NEGATIVE:  # something to break: a body (the GET probes take nothing)
        operations = [operation for operation in operations if operation.method.upper() == "POST"]
    statuses: Counter[int] = Counter()
    for operation in operations:

        @given(case=operation.as_strategy(mode))
        @settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
        def answers_without_a_server_error(case: schemathesis.Case) -> None:
            response = case.call(base_url=fuzzed_service.url, headers=ADMIN, timeout=60)
            statuses[response.status_code] += 1
            assert response.status_code != 500, (case.as_curl_command(), response.text[:1000])
            assert response.status_code < 500 or response.status_code in (503, 504), response.text[:1000]
            if response.status_code >= 400:
                assert set(response.json()["error"]) == error_keys(operation.path), response.text[:1000]

        answers_without_a_server_error()
    assert sum(statuses.values()) >= FUZZ_EXAMPLES * len(operations) // 2, statuses  # the examples were sent


def test_the_fuzzed_service_still_answers(fuzzed_service: RunningService) -> None:
    """Whatever the fuzzer unloaded is loaded again: loading esm2nv's four graphs on two cores may take longer than
    this service's 5 s deadline, a 504 whose cancelled wait leaves Triton loading, so the load is asked again."""
    deadline = time.monotonic() + 120
    while (
        reloaded := requests.post(f"{fuzzed_service.url}/admin/load", json={"model": "esm2nv"}, headers=ADMIN, timeout=60)
    ).status_code == 504 and time.monotonic() < deadline:
        time.sleep(1)
    assert reloaded.status_code == 200, reloaded.text
    response = requests.post(f"{fuzzed_service.url}/embed", json={"sequences": ["MKT"]}, timeout=60)
    assert response.status_code == 200, response.text
