"""Ready means runs, on every runtime: each graph opens and runs a small batch while Triton loads it, so a graph file
its runtime cannot run fails the load with that runtime's own reason, whichever runtime BIONEMO_RUNTIME forces.

What each runtime says of a file that is not a model is checked in-process, for every runtime and every kind of graph
file (an encoder's, the stateful decoder's two parts). What the service makes of it is runtime-agnostic (the backend
lets the runtime's error fail Triton's load), checked once, on one runtime: a repository where an encoder (esm1nv) and
MegaMolBART's stateful decoder have garbage in every graph file keeps the service not ready (/readyz 503) and its log
says why; it serves only the models that run; and an admin's load of either answers 502 with the runtime's reason.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from bionemo_serving.model_catalog import DECODER, ENCODER, MODELS, GraphRole
from bionemo_serving.runtimes.engines import Runtime, open_engine
from support.repositories import NOT_A_MODEL, build_repository
from support.service import RunningService, start_launcher, stop_service
from support.runtimes import DECODER_RUNTIMES

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
SERVED_RUNTIME = Runtime.ONNXRUNTIME
"""The runtime the service is started on: the one every model can run, and the one a remote repository runs."""


def graph_files(runtime: Runtime) -> list[str]:
    """The stems of the graph files `runtime` opens: an encoder's, and the decoder's two parts where it has them."""
    parts = [part.file.removesuffix(".onnx") for part in DECODER.onnx_graphs] if runtime in DECODER_RUNTIMES else []
    return [ENCODER.onnx_graphs[0].file.removesuffix(".onnx"), *parts]


@pytest.mark.parametrize("runtime", list(Runtime), ids=lambda runtime: runtime.value)
def test_each_runtime_refuses_a_file_that_is_not_a_model_in_its_own_words(runtime: Runtime, tmp_path: Path) -> None:
    """What the python backends do while Triton loads a model: open the file the config names, run it once
    (onnxruntime opens its session at the first run)."""
    for graph in graph_files(runtime):
        path = tmp_path / runtime.file(graph)
        path.write_bytes(NOT_A_MODEL)
        if runtime is Runtime.OPENVINO:
            path.with_suffix(".bin").write_bytes(NOT_A_MODEL)
        with pytest.raises(Exception, match=REASONS[runtime].format(graph=graph)):
            open_engine(runtime, path).run([], {}, threads=1)


@pytest.fixture(scope="module")
def broken_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """The service on a repository of the healthy models linked and the broken ones, SERVED_RUNTIME forced, past
    Triton's attempt to load every model."""
    repository = build_repository(tmp_path_factory.mktemp("readiness"), linked=HEALTHY, broken=BROKEN)
    settings = {"BIONEMO_RUNTIME": SERVED_RUNTIME.value, "BIONEMO_ADMIN_TOKEN": TOKEN}
    running = start_launcher({"BIONEMO_MODEL_REPOSITORY": str(repository), **settings}, ready=False)
    try:
        deadline = time.monotonic() + 180
        while not all(f"failed to load '{name}'" in running.log_tail(10**7) for name in BROKEN):
            assert time.monotonic() < deadline, running.log_tail()
            assert running.process.poll() is None, running.log_tail()
            time.sleep(0.5)
        yield running
    finally:
        stop_service(running)


def runtime_of(service: RunningService, triton_model: str) -> Runtime:
    """The runtime the launcher wrote into the model's config: the forced one."""
    (value,) = re.findall(r'key: "runtime"\s*value \{\s*string_value: "([^"]+)"', (service.served_repository / triton_model / "config.pbtxt").read_text())
    return Runtime(value)


def expected_reason(triton_model: str) -> str:
    return REASONS[SERVED_RUNTIME].format(graph=FIRST_GRAPH[triton_model])


@pytest.mark.e2e
def test_a_model_that_cannot_run_keeps_the_service_not_ready_and_the_log_says_why(
    broken_service: RunningService,
) -> None:
    assert [runtime_of(broken_service, name) for name in BROKEN] == [SERVED_RUNTIME] * 2
    log = broken_service.log_tail(10**7)
    for name in BROKEN:
        (line,) = {line for line in log.splitlines() if f"failed to load '{name}' version 1:" in line}
        assert re.search(expected_reason(name), line), line
    for _ in range(3):
        assert requests.get(f"{broken_service.url}/readyz", timeout=30).status_code == 503
        time.sleep(1)


@pytest.mark.e2e
def test_only_the_models_that_run_are_served(broken_service: RunningService) -> None:
    models = broken_service.served_models()
    assert [model["name"] for model in models] == ["esm2nv"]  # megamolbart's decoder cannot run: not megamolbart
    embedded = broken_service.post("/embed", {"sequences": ["MKTAYIAK"]})
    assert embedded.status_code == 200, embedded.text
    refused = broken_service.post("/embed", {"sequences": ["MKTAYIAK"], "model": "esm1nv"})
    assert refused.status_code == 422, refused.text


@pytest.mark.e2e
@pytest.mark.parametrize("model", ["esm1nv", "megamolbart"])
def test_an_admin_load_of_a_model_that_cannot_run_is_a_502_with_the_runtimes_reason(
    broken_service: RunningService, model: str
) -> None:
    answer = broken_service.post("/admin/load", {"model": model}, headers=ADMIN, timeout=180)
    assert answer.status_code == 502, answer.text
    (detail,) = answer.json()["error"]["details"]
    broken = "esm1nv" if model == "esm1nv" else BROKEN[1]
    assert detail["field"] == "model" and f"Triton could not load {broken}" in detail["message"], detail
    assert re.search(expected_reason(broken), detail["message"]), detail["message"]
    assert requests.get(f"{broken_service.url}/readyz", timeout=30).status_code == 503
