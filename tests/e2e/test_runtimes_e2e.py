"""End to end, per runtime: the service with BIONEMO_RUNTIME forcing it answers what transformers computes (the
encoders' states, MegaMolBART's greedy decoding token for token), and the service left to choose runs the runtime its
timings on this machine picked. That the decoder's memory levels off over generations of ever-new shapes, per forced
runtime, is a memory target: `make soak SOAK_RUNTIME=<runtime>` judges it (docs/reliability.md)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http

from bionemo_serving.model_catalog import MODELS
from bionemo_serving.runtimes.choice import Timings
from bionemo_serving.runtimes.engines import Runtime
from support.paths import DEFAULT_REPOSITORY
from support.reference import TOLERANCE, TransformersReference, greedy_reference, mixed_sequences
from support.repositories import build_repository
from support.service import RunningService, start_launcher, stop_service
from support.runtimes import DECODER_RUNTIMES

pytestmark = pytest.mark.e2e

MODELS_CHECKED = ("esm2nv", "prott5nv")
"""Rotary and relative (T5) attention: the two that fused attention kernels treat differently."""
MOLECULES = "megamolbart"
"""Its encoder, and its decoder's cached steps, on the same runtime (the decoder has every runtime but the fused ONNX
file, DECODER_RUNTIMES)."""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default export of the models checked (their required graphs), with its timings."""
    molecules = [MODELS[MOLECULES].triton_name(graph.role) for graph in MODELS[MOLECULES].graphs if not graph.optional]
    return build_repository(tmp_path_factory.mktemp("runtimes-e2e"), copied=[*MODELS_CHECKED, *molecules])


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
    (info,) = [entry for entry in service.served_models() if entry["name"] == model]
    return [(graph["triton_model"], graph["runtime"], graph["chosen_by"]) for graph in info["runtimes"]]


@pytest.mark.parametrize("model", MODELS_CHECKED)
def test_the_forced_runtime_serves_what_transformers_computes(forced: tuple[Runtime, RunningService], model: str) -> None:
    runtime, service = forced
    assert served_runtimes(service, model) == [(model, runtime.value, "BIONEMO_RUNTIME")]
    sequences = mixed_sequences(model)  # 1 residue to the model's limit in one request: several length buckets
    embedded = service.post("/embed", {"sequences": sequences, "model": model})
    hidden = service.post("/hidden", {"sequences": sequences, "model": model})
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
    answer = service.post("/decode", body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["smiles"] == expected


def test_the_runtime_served_is_the_one_the_timings_picked(service: RunningService) -> None:
    """The shared service starts with BIONEMO_RUNTIME unset: each timed graph, the decoder's too, runs the fastest of
    its recorded timings; an untimed one (all layers, contacts: see GraphSpec.timed) runs onnxruntime. The config
    Triton loaded names it; the repository's own config names none, whatever other starts chose meanwhile."""
    triton = tritonclient.http.InferenceServerClient(service.triton_url)
    for info in service.served_models():
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
