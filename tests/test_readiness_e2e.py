"""Ready means runs, on every runtime: each graph opens and runs a small batch while Triton loads it, so a graph file
its runtime cannot run fails the load with that runtime's own reason, whichever runtime BIONEMO_RUNTIME forces.

One service per runtime, on a repository where an encoder (esm1nv) and MegaMolBART's stateful decoder have garbage
in every graph file: started with them, it stays not ready (/readyz 503) and its log says why; it serves only the
models that run; and an admin's load of either answers 502 with the runtime's reason.
"""

from __future__ import annotations

import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from support.paths import DEFAULT_REPOSITORY
from support.service import RunningService, start_launcher, stop_service
from model_catalog import MODELS, GraphRole
from runtimes.engines import Runtime

pytestmark = pytest.mark.e2e

TOKEN = secrets.token_hex(32)
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
BROKEN = ("esm1nv", MODELS["megamolbart"].triton_name(GraphRole.DECODER))
"""An encoder and the stateful decoder (megamolbart_decoder), whose every graph file is garbage."""
HEALTHY = ("esm2nv", "megamolbart_encoder")
REASONS = {
    Runtime.ONNXRUNTIME: r"Load model from \S*/{graph}\.onnx failed:Protobuf parsing failed",
    Runtime.ONNXRUNTIME_FUSED: r"Load model from \S*/{graph}\.fused\.onnx failed:Protobuf parsing failed",
    Runtime.TORCHSCRIPT: r"PytorchStreamReader failed reading zip archive",
    Runtime.OPENVINO: r"Unable to read the model: \S*/{graph}\.openvino\.xml",
}
"""Each runtime's own words for a file that is not a model, `{graph}` the file's stem."""
FIRST_GRAPH = {"esm1nv": "model", BROKEN[1]: "cross_attention"}
"""The graph file each broken model opens first (the decoder opens cross_attention, then step)."""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The healthy models linked, and copies of the broken ones with garbage in every runtime's graph files."""
    folder = tmp_path_factory.mktemp("readiness")
    for name in HEALTHY:
        (folder / name).symlink_to(DEFAULT_REPOSITORY / name, target_is_directory=True)
    for name in BROKEN:
        shutil.copytree(DEFAULT_REPOSITORY / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
        for graph_file in (folder / name / "1").iterdir():
            if graph_file.suffix in {".onnx", ".pt", ".xml", ".bin", ".data"}:
                graph_file.write_bytes(b"not a model")
    return folder


@pytest.fixture(scope="module", params=list(Runtime), ids=lambda runtime: runtime.value)
def broken_service(request: pytest.FixtureRequest, repository: Path) -> Iterator[tuple[Runtime, RunningService]]:
    """The service on `repository` with a runtime forced, past Triton's attempt to load every model."""
    running = start_launcher(
        {"BIONEMO_MODEL_REPOSITORY": str(repository), "BIONEMO_RUNTIME": request.param.value, "BIONEMO_ADMIN_TOKEN": TOKEN},
        ready=False,
    )
    try:
        deadline = time.monotonic() + 180
        while not all(f"failed to load '{name}'" in running.log_tail(10**7) for name in BROKEN):
            assert time.monotonic() < deadline, running.log_tail()
            assert running.process.poll() is None, running.log_tail()
            time.sleep(0.5)
        yield request.param, running
    finally:
        stop_service(running)


def runtime_of(service: RunningService, triton_model: str) -> Runtime:
    """The runtime the launcher wrote into the model's config: the forced one, or the decoder's timed choice where it
    has no file of the forced runtime (no fused-attention decoder)."""
    (value,) = re.findall(r'key: "runtime"\s*value \{\s*string_value: "([^"]+)"', (service.served_repository / triton_model / "config.pbtxt").read_text())
    return Runtime(value)


def expected_reason(service: RunningService, triton_model: str) -> str:
    return REASONS[runtime_of(service, triton_model)].format(graph=FIRST_GRAPH[triton_model])


def test_a_model_that_cannot_run_keeps_the_service_not_ready_and_the_log_says_why(
    broken_service: tuple[Runtime, RunningService],
) -> None:
    runtime, service = broken_service
    assert runtime_of(service, "esm1nv") is runtime
    log = service.log_tail(10**7)
    for name in BROKEN:
        (line,) = {line for line in log.splitlines() if f"failed to load '{name}' version 1:" in line}
        assert re.search(expected_reason(service, name), line), line
    for _ in range(3):
        assert requests.get(f"{service.url}/readyz", timeout=30).status_code == 503
        time.sleep(1)


def test_only_the_models_that_run_are_served(broken_service: tuple[Runtime, RunningService]) -> None:
    _, service = broken_service
    models = requests.get(f"{service.url}/models", timeout=30).json()["models"]
    assert [model["name"] for model in models] == ["esm2nv"]  # megamolbart's decoder cannot run: not megamolbart
    embedded = requests.post(f"{service.url}/embed", json={"sequences": ["MKTAYIAK"]}, timeout=60)
    assert embedded.status_code == 200, embedded.text
    refused = requests.post(f"{service.url}/embed", json={"sequences": ["MKTAYIAK"], "model": "esm1nv"}, timeout=60)
    assert refused.status_code == 422, refused.text


@pytest.mark.parametrize("model", ["esm1nv", "megamolbart"])
def test_an_admin_load_of_a_model_that_cannot_run_is_a_502_with_the_runtimes_reason(
    broken_service: tuple[Runtime, RunningService], model: str
) -> None:
    _, service = broken_service
    answer = requests.post(f"{service.url}/admin/load", json={"model": model}, headers=ADMIN, timeout=180)
    assert answer.status_code == 502, answer.text
    (detail,) = answer.json()["error"]["details"]
    broken = "esm1nv" if model == "esm1nv" else BROKEN[1]
    assert detail["field"] == "model" and f"Triton could not load {broken}" in detail["message"], detail
    assert re.search(expected_reason(service, broken), detail["message"]), detail["message"]
    assert requests.get(f"{service.url}/readyz", timeout=30).status_code == 503
