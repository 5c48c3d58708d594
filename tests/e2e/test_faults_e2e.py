"""Faults: the real tritonserver killed while requests are in flight, on a service of its own."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from support.service import RunningService, start_launcher, stop_service, stop_with_requests_in_flight

pytestmark = pytest.mark.e2e

PROTEIN = "MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL" * 6
RECOVERY_TIMEOUT_S = 120
HANG_LIMIT_S = 20
"""No request may wait longer than this for its answer, Triton gone or not."""


@pytest.fixture(scope="module")
def own_service() -> Iterator[RunningService]:
    """Killed, then stopped: its first test kills its tritonserver and sees it recover, its last stops it with SIGTERM
    (one start for both: a service that came back from a kill must drain like any other)."""
    running = start_launcher({"BIONEMO_MODELS": "esm2nv,megamolbart"})
    yield running
    stop_service(running)


class Load:
    """Clients sending /embed and /generate back to back, recording every answer's status and how long it took."""

    def __init__(self, url: str) -> None:
        self.url, self.stopping, self.outcomes = url, threading.Event(), []
        bodies = [("/embed", {"sequences": [PROTEIN] * 4}), ("/generate", {"smiles": ["CCO"], "num_samples": 2})]
        self.threads = [threading.Thread(target=self._send, args=body) for body in bodies * 2]

    def _send(self, path: str, body: dict[str, object]) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                status = requests.post(f"{self.url}{path}", json=body, timeout=HANG_LIMIT_S * 3).status_code
            except requests.RequestException as error:
                status = type(error).__name__
            self.outcomes.append((path, status, started, time.monotonic() - started))

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join()


@pytest.mark.slow
def test_killed_tritonserver_gives_prompt_503s_not_ready_then_recovers(own_service: RunningService) -> None:
    url = own_service.url
    with Load(url) as load:
        time.sleep(3)  # requests of every kind in flight
        killed_at = time.monotonic()
        server = own_service.tritonserver()
        stubs = server.children()  # the python backend's, one per model instance
        regions = {Path(mapped.path) for stub in stubs for mapped in stub.memory_maps() if "/dev/shm/" in mapped.path}
        server.send_signal(signal.SIGKILL)
        readiness = []
        while time.monotonic() - killed_at < RECOVERY_TIMEOUT_S:
            readiness.append(requests.get(f"{url}/readyz", timeout=30).status_code)
            if readiness[-1] == 200 and 503 in readiness:
                break
            time.sleep(0.2)
        recovered_at = time.monotonic()
        time.sleep(3)  # and serving again, under the same load
    assert 503 in readiness and readiness[-1] == 200, readiness
    assert stubs and not [stub.pid for stub in stubs if stub.is_running()]  # ended with their server
    assert regions and not [region for region in regions if region.exists()]  # and their shared memory with them
    statuses = {status for _, status, _, _ in load.outcomes}
    assert statuses <= {200, 503}, load.outcomes  # never a 500, never a dropped connection
    failed = [(path, started - killed_at) for path, status, started, _ in load.outcomes if status == 503]
    assert failed, "no request was in flight or sent while Triton was away"
    assert max(seconds for _, _, _, seconds in load.outcomes) < HANG_LIMIT_S  # nothing hung
    for path in ("/embed", "/generate"):
        after = [status for p, status, started, _ in load.outcomes if p == path and started > recovered_at]
        assert after and set(after) == {200}, (path, after)


def test_sigterm_drains_the_requests_in_flight_before_exit(own_service: RunningService) -> None:
    """Requests of several seconds each (many decode steps through Triton) still get their answers after SIGTERM.
    Last to use `own_service`: it stops it."""
    body = {"smiles": ["CCO", "c1ccccc1"], "num_samples": 10, "max_length": 400, "scaled_radius": 100.0}

    def stop() -> int:
        own_service.process.send_signal(signal.SIGTERM)
        return own_service.process.wait(timeout=60)

    answers, status, waited = stop_with_requests_in_flight(f"{own_service.url}/generate", body, 6, stop, head_start_s=0.5)
    assert status == 0
    assert answers == [200] * 6 and waited > 1  # they were in flight, and they were answered


@pytest.fixture(scope="module")
def limited_service() -> Iterator[RunningService]:
    """One API worker that holds three requests at once, for two seconds each."""
    limits = {"BIONEMO_API_WORKERS": "1", "BIONEMO_MAX_IN_FLIGHT": "3", "BIONEMO_REQUEST_TIMEOUT_S": "2"}
    running = start_launcher({"BIONEMO_MODELS": "esm2nv,megamolbart", **limits})
    yield running
    stop_service(running)


SLOW = {"smiles": ["CCO", "c1ccccc1", "CCN", "CCC"], "num_samples": 8, "method": "beam", "beam_size": 16,
        "max_length": 400, "scaled_radius": 100.0}  # fmt: skip
"""512 hypotheses decoded for up to 400 steps: far past the two seconds on two cores, as the estimates know."""


def timed_post(url: str, body: dict[str, object]) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.post(url, json=body, timeout=60)
    return response, time.monotonic() - started


def test_a_request_that_cannot_finish_in_time_is_refused_at_once_and_does_not_hold_up_the_others(
    limited_service: RunningService,
) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        slow = pool.submit(timed_post, f"{limited_service.url}/generate", SLOW)
        time.sleep(0.3)
        quick, quick_seconds = timed_post(f"{limited_service.url}/embed", {"sequences": ["MKT"]})
        answer, seconds = slow.result()
    assert quick.status_code == 200 and quick_seconds < 1.5, (quick.text, quick_seconds)
    assert answer.status_code == 503 and seconds < 1, (answer.text, seconds)
    assert int(answer.headers["Retry-After"]) >= 1
    error = answer.json()["error"]
    assert error["type"] == "overloaded" and "more than the 2 s it may take" in error["message"]


def test_past_capacity_every_request_is_answered_at_once_with_retry_after(limited_service: RunningService) -> None:
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda _: timed_post(f"{limited_service.url}/generate", SLOW), range(6)))
    for response, seconds in answers:
        assert response.status_code == 503 and seconds < 1, (response.text, seconds)
        assert int(response.headers["Retry-After"]) >= 1 and response.json()["error"]["type"] == "overloaded"
    healthy = requests.post(f"{limited_service.url}/embed", json={"sequences": ["MKT"]}, timeout=60)
    assert healthy.status_code == 200, healthy.text
