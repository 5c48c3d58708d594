"""Models from S3 (issue 28): the launcher started on `BIONEMO_MODEL_REPOSITORY=s3://127.0.0.1:PORT/bucket/repo`, moto's
server holding the repository and enforcing credentials, which come from the environment as tritonserver reads them.
A repository that cannot be read stops the start at once, saying why (bionemo_serving/startup/remote_repository.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest
import requests
from support.paths import ROOT
from support.service import start_launcher, stop_service
from support.reference import TransformersReference
from support.s3_store import MODEL, S3Store, s3_store

from bionemo_serving.startup.readiness import free_loopback_port

pytestmark = pytest.mark.e2e

PROTEINS = ["MSLKRKNIALIPAAGIGVRFGADKPKQYVEIGSKTVLEHVL", "MKT", "XBUZOACDEFGHIKLMNPQRSTVWYMKTAYIAKQRQISFVKSHFSRQ"]
REFUSAL_TIMEOUT_S = 60
"""Well within the readiness timeout: a bad repository is refused before anything starts."""


@pytest.fixture(scope="module")
def store() -> Iterator[S3Store]:
    with s3_store() as running:
        yield running


def test_the_launcher_serves_a_repository_in_s3_as_transformers_computes(store: S3Store) -> None:
    service = start_launcher({"BIONEMO_MODEL_REPOSITORY": store.url(), **store.credentials})
    try:
        answer = requests.post(f"{service.url}/embed", json={"sequences": PROTEINS, "model": MODEL}, timeout=120)
        assert answer.status_code == 200, answer.text
        reference = TransformersReference(MODEL)
        expected = np.stack([reference.mean_embedding(sequence) for sequence in PROTEINS])
        np.testing.assert_allclose(np.asarray(answer.json()["embeddings"]), expected, rtol=0, atol=1e-4)
        (listed,) = requests.get(f"{service.url}/models", timeout=60).json()["models"]
        assert listed["name"] == MODEL and listed["runtimes"][0]["runtime"] == "onnxruntime"  # as its config records
    finally:
        stop_service(service)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong bucket", "bucket 'elsewhere' does not exist"),
        ("wrong folder", "no model folders in bucket 'models' under nothing-here/"),
        ("wrong secret key", "the AWS credentials were refused (SignatureDoesNotMatch"),
        ("no credentials", "no AWS credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        ("unreachable endpoint", "could not be reached"),
    ],
)
def test_a_repository_that_cannot_be_read_stops_the_start_saying_why(store: S3Store, case: str, expected: str) -> None:
    """tritonserver itself, given any of these, logs one line and waits not ready for good; the launcher refuses
    first, exit status 2, naming the setting and the cause, and starts nothing."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    environment.update(store.credentials, BIONEMO_PORT=str(free_loopback_port()))
    repository = {
        "wrong bucket": store.url(bucket="elsewhere"),
        "wrong folder": store.url(folder="nothing-here"),
        "unreachable endpoint": S3Store(free_loopback_port(), store.credentials).url(),
    }.get(case, store.url())
    if case == "wrong secret key":
        environment["AWS_SECRET_ACCESS_KEY"] = "not-" + environment["AWS_SECRET_ACCESS_KEY"]
    if case == "no credentials":
        del environment["AWS_ACCESS_KEY_ID"], environment["AWS_SECRET_ACCESS_KEY"]
        environment["AWS_SHARED_CREDENTIALS_FILE"] = environment["AWS_CONFIG_FILE"] = os.devnull
    environment["BIONEMO_MODEL_REPOSITORY"] = repository
    started = time.monotonic()
    launcher = subprocess.run(
        [sys.executable, "-m", "bionemo_serving.startup.launch", "service:svc"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=REFUSAL_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert launcher.returncode == 2, launcher.stdout + launcher.stderr
    assert f"bionemo: BIONEMO_MODEL_REPOSITORY={repository}: " in launcher.stderr and expected in launcher.stderr
    assert "tritonserver" not in launcher.stdout and time.monotonic() - started < REFUSAL_TIMEOUT_S
