"""The Triton runner's two ways to run a model, side by side on the service's own tritonserver: `triton.infer(...)`,
as the service calls it (the version, the one output, uncompressed), against what the per-model attribute
`triton.<model>.async_run(...)` does (BentoML 1.4.39's TritonRunnerHandle.async_run_method: the model's metadata
first, then every output, in its client's default encoding, which accepts gzip, at the newest version), made of the
same runner's client calls. Alternating calls of the same esm2nv inputs; latency and this process's CPU per call, and
the bytes each answer carries. The attribute itself is tried once first: with tritonserver_type="http" it fails in
these versions (it converts arrays with `tritonclient.http.aio.np_to_triton_dtype`, which tritonclient 2.73 lacks).

    python -m benchmarks.runner_calls --calls 200 --proteins 1 8

The runner's client lives in BentoML's API workers, set up from BentoML's private container (the address of the
runner's tritonserver); this measurement points it at the service's tritonserver the same way. The service does not.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import bentoml
import numpy as np
import tritonclient.http.aio as triton_http
from bentoml._internal.configuration.containers import BentoMLContainer

from benchmarks.clients import triton_address
from benchmarks.contenders.this_service import SERVICE, tritonserver_url
from benchmarks.processes import ROOT, start, stop
from benchmarks.report import machine_facts
from benchmarks.workload import MODEL, protein
from model_catalog import MODELS
from preprocessing import tokenizer_for
from serving.triton.inference import UNCOMPRESSED

Call = Callable[[], Awaitable[dict[str, np.ndarray]]]


def runner_calls(runner: bentoml.triton.Runner, arrays: dict[str, np.ndarray]) -> dict[str, Call]:
    """The two calls of `arrays` through `runner`, each returning the answer's outputs."""

    async def through_infer() -> dict[str, np.ndarray]:
        inputs = []
        for name, array in arrays.items():
            tensor = triton_http.InferInput(name, list(array.shape), "INT64")
            tensor.set_data_from_numpy(array, binary_data=True)
            inputs.append(tensor)
        output = triton_http.InferRequestedOutput("embeddings", binary_data=True)
        result = await runner.infer(model_name=MODEL, inputs=inputs, model_version="1", outputs=[output], headers=UNCOMPRESSED)
        return {"embeddings": result.as_numpy("embeddings")}

    async def as_the_attribute_does() -> dict[str, np.ndarray]:
        metadata = await runner.get_model_metadata(model_name=MODEL)
        inputs = []
        for spec, array in zip(metadata["inputs"], arrays.values()):
            tensor = triton_http.InferInput(spec["name"], list(array.shape), spec["datatype"])
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        outputs = [triton_http.InferRequestedOutput(output["name"]) for output in metadata["outputs"]]
        result = await runner.infer(model_name=MODEL, inputs=inputs, outputs=outputs)
        return {output["name"]: result.as_numpy(output["name"]) for output in metadata["outputs"]}

    return {"triton.infer": through_infer, f"as triton.{MODEL}.async_run does": as_the_attribute_does}


async def the_attribute(runner: bentoml.triton.Runner, arrays: dict[str, np.ndarray]) -> str:
    """What `triton.<model>.async_run` answers here: its outputs, or its error."""
    try:
        result = await getattr(runner, MODEL).async_run(*arrays.values())
    except Exception as error:  # noqa: BLE001  (reported as it is)
        return f"{type(error).__name__}: {error}"
    return f"answered {', '.join(output['name'] for output in result.get_response()['outputs'])}"


async def measure(calls: dict[str, Call], count: int) -> dict[str, tuple[list[float], list[float], int]]:
    """Per call kind: wall ms and this process's CPU ms of each call (kinds alternating), and the answer's bytes."""
    timings: dict[str, tuple[list[float], list[float], int]] = {name: ([], [], 0) for name in calls}
    order = list(calls)
    for _ in range(count):
        random.shuffle(order)
        for name in order:
            wall, cpu = time.perf_counter(), time.process_time()
            outputs = await calls[name]()
            walls, cpus, _ = timings[name]
            walls.append((time.perf_counter() - wall) * 1000)
            cpus.append((time.process_time() - cpu) * 1000)
            timings[name] = (walls, cpus, sum(array.nbytes for array in outputs.values()))
    return timings


async def run(address: str, proteins: list[int], count: int) -> list[str]:
    BentoMLContainer.remote_runner_mapping.set({"triton": address})
    runner = bentoml.triton.Runner("triton", model_repository=str(ROOT / "model_repository"), tritonserver_type="http")
    runner.init_client()
    tokenizer = tokenizer_for(MODELS[MODEL])
    rng = random.Random(0)
    rows = []
    print(f"triton.{MODEL}.async_run: {await the_attribute(runner, tokenizer.pad([tokenizer.encode('MKT')]).model_inputs())}")
    for size in proteins:
        arrays = tokenizer.pad([tokenizer.encode(protein(rng, 270)) for _ in range(size)]).model_inputs()
        calls = runner_calls(runner, arrays)
        first = [await call() for call in calls.values()]
        assert np.allclose(first[0]["embeddings"], first[1]["embeddings"], atol=1e-5), "the two calls answer alike"
        for name, (walls, cpus, size_bytes) in (await measure(calls, count)).items():
            rows.append(
                f"| {name} | {size} x 270 | {statistics.median(walls):.2f} | {statistics.median(cpus):.2f} | "
                f"{size_bytes:,} |"
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls of each kind per batch size")
    parser.add_argument("--proteins", type=int, nargs="+", default=[1, 8], help="proteins per call")
    args = parser.parse_args(argv)
    service = start(SERVICE)
    try:
        rows = asyncio.run(run(triton_address(tritonserver_url(service)), args.proteins, args.calls))
    finally:
        stop(service)
    print(f"{machine_facts()['cpu']}; {args.calls} calls of each kind, alternating, medians\n")
    print("| call | proteins x residues | ms per call | client CPU ms per call | answer bytes |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
