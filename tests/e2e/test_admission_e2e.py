"""Admission by estimated cost against the real stack: what cannot finish by the client's deadline is refused at once
with Retry-After, and a client that goes away has its work stopped between Triton calls (Triton's own count of the
language model's passes stops)."""

from __future__ import annotations

import random
import time

import pytest
import requests
import tritonclient.http

from bionemo_serving.preprocessing.protein_tokenizer import STANDARD_RESIDUES
from support.service import RunningService

pytestmark = pytest.mark.e2e

SCAN_RESIDUES = 300
"""A scan of this many residues takes as many passes of the language model: seconds on two cores at 8M."""
SETTLE_TIMEOUT_S = 60
SETTLED_READINGS = 3


def protein(length: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choices(STANDARD_RESIDUES, k=length))


def language_model_rows(service: RunningService) -> int:
    client = tritonclient.http.InferenceServerClient(service.triton_url)
    try:
        (stats,) = client.get_inference_statistics("esm2nv_language_model")["model_stats"]
        return int(stats["inference_count"])
    finally:
        client.close()


def test_work_that_cannot_finish_by_the_clients_deadline_is_refused_at_once_with_retry_after(
    service: RunningService,
) -> None:
    heavy = {"sequences": [protein(1000, seed) for seed in range(64)]}
    response = service.post("/embed", heavy, headers={"X-Request-Timeout": "0.5", "X-Client-Id": "admission-e2e"})
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"].isdigit() and int(response.headers["Retry-After"]) >= 1
    error = response.json()["error"]
    assert error["type"] == "overloaded" and error["details"][0]["field"] == "request"
    assert "by itself" in error["message"]
    # its time in the service, as the benchmark reads it: refused before any work
    timing, _, milliseconds = response.headers["Server-Timing"].partition(";dur=")
    assert timing == "total" and 0 < float(milliseconds) < 1000
    bad = service.post("/embed", {"sequences": ["MKT"]}, headers={"X-Request-Timeout": "soon"})
    assert bad.status_code == 422 and bad.json()["error"]["details"][0]["field"] == "X-Request-Timeout"
    assert service.post("/embed", {"sequences": ["MKT"]}).status_code == 200  # still answering


def test_a_client_that_goes_away_has_its_scan_stopped_between_triton_calls(service: RunningService) -> None:
    body = {"sequence": protein(SCAN_RESIDUES, 7), "scan": True}
    before = language_model_rows(service)
    with pytest.raises(requests.exceptions.ReadTimeout):
        service.post("/score", body, timeout=1.0)  # the client gives up after 1 s and closes its connection
    # The calls already in Triton's queue end there (Triton does not drop them); no new one is sent: the count settles
    # (unchanged over SETTLED_READINGS readings 2 s apart).
    readings, settled = [language_model_rows(service)], time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < settled and (len(readings) < SETTLED_READINGS or len(set(readings[-SETTLED_READINGS:])) > 1):
        time.sleep(2)
        readings.append(language_model_rows(service))
    stopped_at = readings[-1]
    assert stopped_at - before < SCAN_RESIDUES, "every pass of the scan ran: nothing was stopped"
    assert len(set(readings[-SETTLED_READINGS:])) == 1, f"the scan's passes went on after its client had gone: {readings}"
    assert service.post("/score", {"sequence": "MKTAYIAKQR", "mutations": ["K2R"]}).status_code == 200
