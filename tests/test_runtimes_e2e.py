"""End to end, per runtime: the service with BIONEMO_RUNTIME forcing it answers what transformers computes (the
encoders' states, MegaMolBART's greedy decoding token for token), the decoder's memory levels off over generations of
ever-new shapes, and the service left to choose runs the runtime its timings on this machine picked."""

from __future__ import annotations

import concurrent.futures
import functools
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import requests
import tritonclient.http

from support.paths import DEFAULT_REPOSITORY
from support.service import RunningService, start_launcher, stop_service
from model_catalog import MODELS
from runtimes.engines import Runtime
from support.reference import TransformersReference
from runtimes.choice import Timings
from test_molecules_e2e import greedy_reference
from test_cached_decoder import DECODER_RUNTIMES
from test_service_e2e import TOLERANCE, mixed_sequences

pytestmark = pytest.mark.e2e

MODELS_CHECKED = ("esm2nv", "prott5nv")
"""Rotary and relative (T5) attention: the two that fused attention kernels treat differently."""
MOLECULES = "megamolbart"
"""Its encoder, and its decoder's cached steps, on the same runtime (the decoder has every runtime but the fused ONNX
file, DECODER_RUNTIMES)."""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default export of the models checked (their required graphs), with its timings: a forced runtime is written
    into these configs."""
    root = tmp_path_factory.mktemp("runtimes-e2e")
    names = [*MODELS_CHECKED, *(MODELS[MOLECULES].triton_name(graph.role) for graph in MODELS[MOLECULES].graphs if not graph.optional)]
    for name in names:
        shutil.copytree(DEFAULT_REPOSITORY / name, root / name)
    return root


@pytest.fixture(scope="module", params=list(Runtime), ids=lambda runtime: runtime.value)
def forced(request: pytest.FixtureRequest, repository: Path) -> Iterator[tuple[Runtime, RunningService]]:
    """One service per runtime, every model of `repository` forced to it (one start per runtime keeps `make test`
    short)."""
    running = start_launcher({"BIONEMO_MODEL_REPOSITORY": str(repository), "BIONEMO_RUNTIME": request.param.value})
    yield request.param, running
    stop_service(running)


reference = functools.cache(TransformersReference)
"""One per model for the whole module: a parametrized fixture here would make pytest start a runtime's service
twice, interleaving the runtimes to keep each reference's tests together."""


def served_runtimes(service: RunningService, model: str) -> list[tuple[str, str, str]]:
    """(Triton model, runtime, chosen by) of each graph of `model`, as GET /models shows them."""
    (info,) = [entry for entry in requests.get(f"{service.url}/models", timeout=30).json()["models"] if entry["name"] == model]
    return [(graph["triton_model"], graph["runtime"], graph["chosen_by"]) for graph in info["runtimes"]]


@pytest.mark.parametrize("model", MODELS_CHECKED)
def test_the_forced_runtime_serves_what_transformers_computes(forced: tuple[Runtime, RunningService], model: str) -> None:
    runtime, service = forced
    assert served_runtimes(service, model) == [(model, runtime.value, "BIONEMO_RUNTIME")]
    sequences = mixed_sequences(model)  # 1 residue to the model's limit in one request: several length buckets
    embedded = requests.post(f"{service.url}/embed", json={"sequences": sequences, "model": model}, timeout=120)
    hidden = requests.post(f"{service.url}/hidden", json={"sequences": sequences, "model": model}, timeout=120)
    assert embedded.status_code == hidden.status_code == 200, embedded.text + hidden.text
    states = np.asarray(hidden.json()["hiddens"])
    for row, (sequence, vector) in enumerate(zip(sequences, embedded.json()["embeddings"])):
        assert np.abs(np.asarray(vector) - reference(model).mean_embedding(sequence)).max() < TOLERANCE, (runtime, row)
        expected = reference(model).hidden_states(sequence)
        assert np.abs(states[row, : len(expected)] - expected).max() < TOLERANCE, (runtime, row)


def test_the_forced_runtime_decodes_what_transformers_generates(forced: tuple[Runtime, RunningService]) -> None:
    """Greedy /decode of latents far from the untrained model's comfort zone (a new token at each step) equals
    transformers' generate token for token, its cached steps on the forced runtime; a runtime the decoder lacks
    leaves it to its timings."""
    runtime, service = forced
    (encoder, (decoder, decoder_runtime, decoder_chosen_by)) = served_runtimes(service, MOLECULES)
    assert encoder == (f"{MOLECULES}_encoder", runtime.value, "BIONEMO_RUNTIME")
    assert decoder == f"{MOLECULES}_decoder"
    if runtime in DECODER_RUNTIMES:
        assert (decoder_runtime, decoder_chosen_by) == (runtime.value, "BIONEMO_RUNTIME")
    else:
        assert decoder_chosen_by == "measurement"
    rng = np.random.default_rng(0)
    hiddens = (rng.standard_normal((4, 9, 256)) * 100).astype(np.float32)
    mask = np.ones((4, 9), dtype=np.int64)
    mask[1, 5:] = mask[3, 2:] = 0
    hiddens[mask == 0] = 0
    expected = greedy_reference(reference(MOLECULES), hiddens, mask, 12)
    assert len(set(expected)) == 4  # the comparison has teeth
    body = {"hiddens": hiddens.tolist(), "mask": mask.tolist(), "max_length": 12}
    answer = requests.post(f"{service.url}/decode", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["smiles"] == expected


DECODINGS_AT_ONCE, MEMORY_ROUNDS, ROUND_GENERATIONS, MEMORY_MARGIN = 4, 5, 40, 0.10
"""/decode requests in flight (the decode batcher merges their rows: up to 32 a step), rounds of generations and
generations per round, and how much the decoder stub's settled memory may grow from the first round to the last:
OpenVINO keeping every shape's kernels grew 16 %, onnxruntime's arena 10.5 %; fixed, every runtime stays within 1.5 %
(docs/reliability.md)."""


def decoder_stub(service: RunningService) -> psutil.Process:
    """The python-backend stub of MegaMolBART's decoder: Triton names its instance in the stub's arguments."""
    (stub,) = [
        process
        for process in psutil.Process(service.process.pid).children(recursive=True)
        if "triton_python_backend_stub" in process.name() and process.cmdline()[-2].startswith(f"{MOLECULES}_decoder")
    ]
    return stub


def decode_body(rng: np.random.Generator, rows: int, width: int, tokens: int) -> dict[str, object]:
    """Greedy /decode of `rows` latents `width` wide, far from the untrained model's comfort zone: a new token at each
    of the `tokens` steps, none ending early."""
    hiddens = (rng.standard_normal((rows, width, 256)) * 100).astype(np.float32)
    return {"hiddens": hiddens.tolist(), "mask": np.ones((rows, width), dtype=int).tolist(), "max_length": tokens}


def test_the_decoder_memory_levels_off_over_generations_of_new_shapes(forced: tuple[Runtime, RunningService]) -> None:
    """What `make soak` found (issue 27): the decoder's runtime met a new input shape at nearly every step (rows, cache
    length and source width all vary) and its stub grew for as long as it served. The largest decodings first, so
    every arena holds its bound, then rounds of 1-8 rows over sources 5-60 wide for 10-80 tokens. Memory is read
    settled, after each round: with nothing in flight, once the backend has handed back what was freed (FreedMemory,
    at most once a second), since while decodings run it moves by up to 100 MiB with the rows and caches in flight.
    What a runtime keeps per shape it met shows as settled memory rising round after round."""
    runtime, service = forced
    stub, rng = decoder_stub(service), np.random.default_rng(27)
    largest = [decode_body(rng, 8, 60, 80) for _ in range(DECODINGS_AT_ONCE)]
    shapes = zip(*(rng.integers(low, high, MEMORY_ROUNDS * ROUND_GENERATIONS) for low, high in ((1, 9), (5, 61), (10, 81))))
    bodies = [decode_body(rng, int(rows), int(width), int(tokens)) for rows, width, tokens in shapes]

    def decode(body: dict[str, object]) -> None:
        answer = requests.post(f"{service.url}/decode", json=body, timeout=120)
        assert answer.status_code == 200, answer.text

    def settled_mib() -> float:
        # Past FreedMemory's interval, then one step of one row, so that every reading follows the same last call:
        # read without it, OpenVINO's went 200, 209, 230, 213, 231 MiB, up and down with whatever ended the round.
        time.sleep(1.5)
        decode(decode_body(rng, 1, 5, 1))
        return stub.memory_info().rss / 2**20

    settled = []
    with concurrent.futures.ThreadPoolExecutor(DECODINGS_AT_ONCE) as pool:
        list(pool.map(decode, largest))
        for start in range(0, len(bodies), ROUND_GENERATIONS):
            list(pool.map(decode, bodies[start : start + ROUND_GENERATIONS]))
            settled.append(settled_mib())
    print(f"{runtime.value}: the decoder stub's settled MiB after each round of {ROUND_GENERATIONS}: {settled}")
    assert settled[-1] <= settled[0] * (1 + MEMORY_MARGIN), f"the decoder stub grew: {settled} MiB"


def test_the_runtime_served_is_the_one_the_timings_picked(service: RunningService) -> None:
    """The shared service starts with BIONEMO_RUNTIME unset: each timed graph, the decoder's too, runs the fastest of
    its recorded timings; an untimed one (all layers, contacts: see GraphSpec.timed) runs onnxruntime. The config
    Triton loaded names it; the repository's own config names none, whatever other starts chose meanwhile."""
    triton = tritonclient.http.InferenceServerClient(service.triton_url)
    for info in requests.get(f"{service.url}/models", timeout=30).json()["models"]:
        timed = {MODELS[info["name"]].triton_name(spec.role): spec.timed for spec in MODELS[info["name"]].graphs}
        for graph in info["runtimes"]:
            folder = DEFAULT_REPOSITORY / graph["triton_model"]
            assert 'key: "runtime"' not in (folder / "config.pbtxt").read_text()
            if not timed[graph["triton_model"]]:
                assert (graph["runtime"], graph["chosen_by"]) == ("onnxruntime", "default"), graph
                assert not (folder / "runtime.json").exists()
                continue
            timings = json.loads((folder / "runtime.json").read_text())
            totals = {
                runtime: sum(times.values())
                for runtime, times in timings["milliseconds"].items()
                if Timings(**timings).eligible(runtime)
            }
            assert graph["chosen_by"] == "measurement" and graph["cpu"] == timings["cpu"]
            assert graph["runtime"] == min(totals, key=totals.__getitem__), (graph, totals)
            loaded = triton.get_model_config(graph["triton_model"])["parameters"]
            assert loaded["runtime"]["string_value"] == graph["runtime"]
