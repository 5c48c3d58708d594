"""The runtime each graph runs: every exported runtime held to torch, the fastest timed here recorded (the encoders on
their length buckets, the incremental decoder on whole generations) unless its memory grew, a setting overriding it, and a
record that no longer holds for this machine timed again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from bionemo_serving.exporter import export_model
from bionemo_serving.exporter.architectures import load_for_export
from bionemo_serving.exporter.graph_inputs import verification_inputs
from bionemo_serving.model_catalog import ENCODER, MODELS, GraphRole
from bionemo_serving.runtimes import choice, engines
from bionemo_serving.runtimes.choice import (
    COPIES_WEIGHTS,
    GROWTH_LIMIT_MIB,
    TIMED_RUNS,
    WARM_UP_RUNS,
    METHOD,
    NOT_TIMED,
    RECORD,
    Choice,
    RuntimeChoiceError,
    Timings,
    choose_runtimes,
    cpu_model,
    instance_threads,
    main,
    timeable,
    write_into_configs,
)
from bionemo_serving.runtimes.engines import (
    SHARED_WEIGHTS,
    Arena,
    CoreShare,
    FreedMemory,
    ProcessBoard,
    Runtime,
    open_engine,
    process_start,
)
from bionemo_serving.runtimes.served_repository import relink
from bionemo_serving.startup.settings import Settings, SettingsError
from support.checkpoints import TinyExport, TinyModels, tiny
from support.paths import DEFAULT_REPOSITORY, ROOT
from support.repositories import build_repository, models_in
from support.runtimes import DECODER_RUNTIMES

TINY_ESM2 = tiny("esm2nv")


@pytest.fixture(scope="module")
def exported(tiny_models: TinyModels) -> TinyExport:
    return tiny_models.export("esm2nv")


@pytest.fixture
def repository(exported: TinyExport, tmp_path: Path) -> Path:
    """A fresh copy of the exported repository, nothing recorded yet."""
    return build_repository(tmp_path / "repository", copied=models_in(exported.repository), source=exported.repository)


def config_of(repository: Path, model: str = "esm2nv") -> model_config_pb2.ModelConfig:
    return text_format.Parse((repository / model / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def chosen(repository: Path, forced: dict[str, Runtime], models: list[str], **options) -> dict[str, Runtime]:
    """The runtime choose_runtimes picks for each Triton model."""
    return {name: choice.runtime for name, choice in choose_runtimes(repository, forced, models, **options).items()}


def chosen_config(choices: dict[str, Choice], model: str = "esm2nv") -> model_config_pb2.ModelConfig:
    """The config a start serves `model` with."""
    return text_format.Parse(choices[model].config_text(), model_config_pb2.ModelConfig())


@pytest.mark.e2e
def test_export_writes_every_runtime_and_each_equals_torch(exported: TinyExport) -> None:
    """Each file is opened as the backend opens it and run on other batches than the export's gate ran."""
    loaded = load_for_export(TINY_ESM2, exported.checkpoint)
    module = loaded.graphs[GraphRole.ENCODER]
    batches = verification_inputs(TINY_ESM2, GraphRole.ENCODER, loaded.graphs, seed=11)
    for runtime in Runtime:
        engine = open_engine(runtime, exported.repository / "esm2nv" / "1" / runtime.file("model"))
        for batch in batches:
            hidden_states, embeddings = engine.run(["hidden_states", "embeddings"], batch.feeds, threads=2)
            with torch.inference_mode():
                expected = [tensor.numpy() for tensor in module(*(torch.from_numpy(array) for array in batch.feeds.values()))]
            real = batch.compared["hidden_states"]
            assert np.abs(hidden_states[real] - expected[0][real]).max() < 1e-4, runtime
            assert np.abs(embeddings - expected[1]).max() < 1e-4, runtime


@pytest.mark.e2e
def test_the_fastest_timed_runtime_is_chosen_and_the_timings_kept_beside_the_config(repository: Path) -> None:
    exported_config = (repository / "esm2nv" / "config.pbtxt").read_text()
    lines: list[str] = []
    choices = choose_runtimes(repository, {}, ["esm2nv"], report=lines.append)
    record = json.loads((repository / "esm2nv" / RECORD).read_text())
    totals = {runtime: sum(times.values()) for runtime, times in record["milliseconds"].items()}
    timed = {runtime.value for runtime in Runtime if runtime is not Runtime.TORCHSCRIPT}  # never chosen: not timed
    assert set(totals) == set(record["grown_mib"]) == timed
    assert record["left_out"] == {Runtime.TORCHSCRIPT.value: NOT_TIMED}
    choosable = {runtime: total for runtime, total in totals.items() if Timings(**record).eligible(runtime)}
    assert set(choices) == {"esm2nv", "esm2nv_language_model"}  # timed as the encoder is; the layers run untimed
    assert choices["esm2nv"].runtime == Runtime(min(choosable, key=choosable.__getitem__)) != Runtime.TORCHSCRIPT
    assert (repository / "esm2nv" / "config.pbtxt").read_text() == exported_config  # a choice is served, not written
    config = chosen_config(choices)
    assert config.parameters["runtime"].string_value == choices["esm2nv"].runtime.value
    summary = json.loads(config.parameters["runtime_timings"].string_value)
    assert summary["chosen_by"] == "measurement" and summary["cpu"] == record["cpu"] == cpu_model()
    assert summary["threads"] == record["threads"] == instance_threads(config) == 1  # 2 cores, 2 busy instances
    assert choices["esm2nv"].config_text().startswith("# esm2nv: the encoder of esm2nv")
    shapes = list(record["milliseconds"]["onnxruntime"])
    assert shapes[0] == "1x64" and shapes[-1] == "1x1024", "one row up to the longest input, as the buckets send"
    assert any(line.startswith("esm2nv: timing") for line in lines)


@pytest.mark.e2e
def test_weights_from_the_mapping_size_run_where_they_lie_for_every_graph_and_copying_runtimes_are_not_timed(
    repository: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What lets esm2nv at 650M hold its weights once: the encoder's and the language model's sessions map the one
    model.weights (a copied repository's files linked again first), unpacked, with the answers of the prepacked
    session; OpenVINO, which copies them, is not timed, and BIONEMO_RUNTIME may still force it."""
    graphs = [repository / name / "1" / "model.onnx" for name in ("esm2nv", "esm2nv_language_model")]
    assert relink(repository) == 3  # the copy made four files of the four hardlinks
    batch = verification_inputs(TINY_ESM2, GraphRole.ENCODER, {}, seed=11)[0].feeds
    prepacked = open_engine(Runtime.ONNXRUNTIME, graphs[0]).run(["hidden_states"], batch, threads=2)[0]
    monkeypatch.setattr(engines, "MAPPED_FROM_MIB", 0)
    mapped = [open_engine(Runtime.ONNXRUNTIME, graph) for graph in graphs]
    assert np.abs(mapped[0].run(["hidden_states"], batch, threads=2)[0] - prepacked).max() < 1e-5
    scored = verification_inputs(TINY_ESM2, GraphRole.LANGUAGE_MODEL, {}, seed=11)[0].feeds
    mapped[1].run(["log_probs"], scored, threads=1)
    maps = [line.split() for line in Path("/proc/self/maps").read_text().splitlines()]
    inodes = {int(fields[4]) for fields in maps if len(fields) == 6 and fields[5].endswith(f"/{SHARED_WEIGHTS}")}
    assert inodes == {(graphs[0].parent / SHARED_WEIGHTS).stat().st_ino}  # every session maps the one file
    record = choose_runtimes(repository, {}, ["esm2nv"])["esm2nv"].timings
    assert record.left_out[Runtime.OPENVINO.value] == COPIES_WEIGHTS and Runtime.OPENVINO.value not in record.milliseconds
    assert record.fastest().maps_weights and record.can_run(Runtime.OPENVINO)
    assert chosen(repository, {"esm2nv": Runtime.OPENVINO}, ["esm2nv"])["esm2nv"] is Runtime.OPENVINO


@pytest.mark.e2e
@pytest.mark.parametrize("long_round_s", [0.0, 600.0])
def test_runtimes_whose_rounds_are_long_are_timed_in_one_round(
    repository: Path, monkeypatch: pytest.MonkeyPatch, long_round_s: float
) -> None:
    """What bounds the timings at 650M: every runtime's work runs WARM_UP_RUNS + 1 times where a round outlasts
    LONG_ROUND_S (0 here), WARM_UP_RUNS + TIMED_RUNS times otherwise."""
    runs: dict[tuple[str, str], int] = {}

    def counted(runtime: Runtime, path: Path, **options):
        engine = open_engine(runtime, path, **options)
        key = (path.parent.parent.name, runtime.value)

        class Counted:
            def run(self, outputs, feeds, threads):
                runs[key] = runs.get(key, 0) + 1
                return engine.run(outputs, feeds, threads)

        return Counted()

    monkeypatch.setattr(choice, "open_engine", counted)
    monkeypatch.setattr(choice, "LONG_ROUND_S", long_round_s)
    choices = choose_runtimes(repository, {}, ["esm2nv"])  # the encoder and the language model
    rounds = WARM_UP_RUNS + (1 if long_round_s == 0.0 else TIMED_RUNS)
    expected = {
        (graph, runtime): rounds * len(shapes)
        for graph, chosen in choices.items()
        for runtime, shapes in chosen.timings.milliseconds.items()
    }
    assert len(expected) == 6 and runs == expected


@pytest.mark.e2e
def test_a_record_that_holds_is_not_timed_again(repository: Path) -> None:
    choose_runtimes(repository, {}, ["esm2nv"])
    before = (repository / "esm2nv" / RECORD).read_text()
    lines: list[str] = []
    choose_runtimes(repository, {}, ["esm2nv"], report=lines.append)
    assert not any("timing" in line for line in lines)
    assert (repository / "esm2nv" / RECORD).read_text() == before


@pytest.mark.e2e
@pytest.mark.parametrize(
    "stale",
    [
        lambda record: record.update(cpu=f"not {record['cpu']}"),  # whatever CPU runs the tests
        lambda record: record.update(threads=record["threads"] + 1),
        lambda record: record["milliseconds"].pop("openvino"),
        lambda record: record.update(method=METHOD - 1),
        lambda record: [record.pop(key) for key in ("method", "grown_mib")],  # a record from before either was kept
    ],
    ids=["another-cpu", "other-threads", "another-set-of-runtimes", "another-method", "an-older-record"],
)
def test_a_record_made_elsewhere_is_timed_again(repository: Path, stale) -> None:
    choose_runtimes(repository, {}, ["esm2nv"])
    path = repository / "esm2nv" / RECORD
    record = json.loads(path.read_text())
    stale(record)
    path.write_text(json.dumps(record))
    lines: list[str] = []
    choose_runtimes(repository, {}, ["esm2nv"], report=lines.append)
    assert any(line.startswith("esm2nv: timing") for line in lines)
    assert json.loads(path.read_text())["cpu"] == cpu_model()


def test_a_runtime_whose_memory_grew_while_timed_is_not_chosen_however_fast() -> None:
    fast, slow = Runtime.OPENVINO.value, Runtime.ONNXRUNTIME.value
    timings = Timings("a CPU", 1, 1, {fast: {"1x64": 1.0}, slow: {"1x64": 2.0}}, {fast: 0.0, slow: 0.0}, {}, METHOD)
    assert timings.fastest() is Runtime.OPENVINO
    grown = replace(timings, grown_mib={fast: GROWTH_LIMIT_MIB + 0.1, slow: 0.0})
    assert grown.fastest() is Runtime.ONNXRUNTIME and not grown.eligible(fast)


@pytest.mark.e2e
def test_a_setting_overrides_the_measurement_and_unsetting_it_restores_it(repository: Path) -> None:
    measured = chosen(repository, {}, ["esm2nv"])["esm2nv"]
    forced = next(runtime for runtime in Runtime if runtime is not measured)
    every = {"esm2nv": forced, "esm2nv_language_model": forced}
    choices = choose_runtimes(repository, {"esm2nv": forced}, ["esm2nv"])
    assert {name: choice.runtime for name, choice in choices.items()} == every
    config = chosen_config(choices)
    assert config.parameters["runtime"].string_value == forced.value
    assert json.loads(config.parameters["runtime_timings"].string_value)["chosen_by"] == "BIONEMO_RUNTIME"
    assert chosen(repository, {}, ["esm2nv"])["esm2nv"] == measured


@pytest.mark.e2e
def test_the_command_writes_the_choice_into_the_repository_configs(repository: Path) -> None:
    """For a repository served elsewhere untimed (S3): `python -m bionemo_serving.runtimes.choice` records it there."""
    choices = choose_runtimes(repository, {"esm2nv": Runtime.OPENVINO}, ["esm2nv"])
    write_into_configs(choices)
    assert (repository / "esm2nv" / "config.pbtxt").read_text() == choices["esm2nv"].config_text()
    assert config_of(repository).parameters["runtime"].string_value == Runtime.OPENVINO.value


@pytest.mark.e2e
def test_a_forced_runtime_that_was_not_exported_is_refused(repository: Path) -> None:
    for graph in ("esm2nv", "esm2nv_language_model"):
        (repository / graph / "1" / Runtime.TORCHSCRIPT.file("model")).unlink()
    with pytest.raises(RuntimeChoiceError, match=r"esm2nv cannot run on torchscript here \(esm2nv: not exported"):
        choose_runtimes(repository, {"esm2nv": Runtime.TORCHSCRIPT}, ["esm2nv"])


@pytest.mark.e2e
def test_a_new_export_is_timed_again(repository: Path, exported: TinyExport) -> None:
    choose_runtimes(repository, {}, ["esm2nv"])
    # A new export of the encoder alone (every runtime, as any export): it removes the record of the graphs it replaces.
    export_model(replace(TINY_ESM2, graphs=(ENCODER,)), exported.checkpoint, repository)
    lines: list[str] = []
    choose_runtimes(repository, {}, ["esm2nv"], report=lines.append)
    assert any(line.startswith("esm2nv: timing") for line in lines)
    assert (repository / "esm2nv" / RECORD).is_file()


@pytest.fixture(scope="module")
def exported_molecules(tiny_models: TinyModels) -> Path:
    return tiny_models.export("megamolbart").repository


@pytest.fixture
def molecules(exported_molecules: Path, tmp_path: Path) -> Path:
    """A fresh copy of the exported megamolbart, nothing recorded yet."""
    return build_repository(tmp_path / "repository", copied=models_in(exported_molecules), source=exported_molecules)


@pytest.mark.e2e
def test_the_decoder_records_the_fastest_over_whole_generations(molecules: Path) -> None:
    choices = chosen(molecules, {}, ["megamolbart"])
    record = json.loads((molecules / "megamolbart_decoder" / RECORD).read_text())
    assert all(list(times) == ["generation 1x100", "generation 16x100"] for times in record["milliseconds"].values())
    totals = {runtime: sum(times.values()) for runtime, times in record["milliseconds"].items()}
    assert set(totals) == set(record["grown_mib"]) == {runtime.value for runtime in DECODER_RUNTIMES} - {"torchscript"}
    choosable = {runtime: total for runtime, total in totals.items() if Timings(**record).eligible(runtime)}
    assert choices["megamolbart_decoder"] == Runtime(min(choosable, key=choosable.__getitem__))
    assert record["threads"] == len(os.sched_getaffinity(0))  # its one instance runs on every core
    assert "megamolbart_encoder" in choices


@pytest.mark.e2e
def test_a_runtime_only_the_encoder_has_forces_the_encoder_and_leaves_the_decoder_to_its_timings(
    molecules: Path,
) -> None:
    lines: list[str] = []
    choices = choose_runtimes(molecules, {"megamolbart": Runtime.ONNXRUNTIME_FUSED}, ["megamolbart"], report=lines.append)
    record = json.loads((molecules / "megamolbart_decoder" / RECORD).read_text())
    measured = record["milliseconds"]
    choosable = [runtime for runtime in measured if Timings(**record).eligible(runtime)]
    fastest = min(choosable, key=lambda runtime: sum(measured[runtime].values()))
    runtimes = {name: choice.runtime for name, choice in choices.items()}
    assert runtimes == {"megamolbart_encoder": Runtime.ONNXRUNTIME_FUSED, "megamolbart_decoder": Runtime(fastest)}
    decoder = json.loads(chosen_config(choices, "megamolbart_decoder").parameters["runtime_timings"].string_value)
    assert decoder["chosen_by"] == "measurement"
    assert any(line.startswith("megamolbart_decoder: no onnxruntime-fused (not exported") for line in lines)


@pytest.mark.e2e
def test_a_setting_for_the_model_forces_its_encoder_and_its_decoder(molecules: Path) -> None:
    choices = choose_runtimes(molecules, {"megamolbart": Runtime.OPENVINO}, ["megamolbart"])
    forced = {name: choice.runtime for name, choice in choices.items()}
    assert forced == {"megamolbart_encoder": Runtime.OPENVINO, "megamolbart_decoder": Runtime.OPENVINO}
    decoder = chosen_config(choices, "megamolbart_decoder").parameters
    assert decoder["runtime"].string_value == Runtime.OPENVINO.value
    assert json.loads(decoder["runtime_timings"].string_value)["chosen_by"] == "BIONEMO_RUNTIME"


@pytest.mark.e2e
def test_the_decoder_runs_a_runtime_only_with_both_of_its_parts(exported_molecules: Path, tmp_path: Path) -> None:
    version = Path(shutil.copytree(exported_molecules / "megamolbart_decoder" / "1", tmp_path / "1"))
    (version / Runtime.TORCHSCRIPT.file("step")).unlink()
    files, left_out = timeable(version, ("cross_attention", "step"))
    assert left_out[Runtime.TORCHSCRIPT.value] == "not exported (step.torchscript.pt missing)"
    assert files[Runtime.OPENVINO] == {part: version / Runtime.OPENVINO.file(part) for part in ("cross_attention", "step")}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("auto", {}),
        ("", {}),
        ("openvino", {name: Runtime.OPENVINO for name in MODELS}),
        ("esm2nv=torchscript, prott5nv=onnxruntime", {"esm2nv": Runtime.TORCHSCRIPT, "prott5nv": Runtime.ONNXRUNTIME}),
    ],
)
def test_runtime_setting(value: str, expected: dict[str, Runtime]) -> None:
    assert Settings.from_environment({"BIONEMO_RUNTIME": value}).runtimes == expected


@pytest.mark.parametrize("value", ["tensorrt", "esm2nv=tvm", "esm9=openvino", "esm2nv"])
def test_a_bad_runtime_setting_names_what_is_known(value: str) -> None:
    with pytest.raises(SettingsError, match=r"BIONEMO_RUNTIME=.*runtimes: onnxruntime, onnxruntime-fused"):
        Settings.from_environment({"BIONEMO_RUNTIME": value})


def test_the_command_refuses_a_bad_runtime_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BIONEMO_RUNTIME", "tensorrt")
    assert main(["--repository", str(tmp_path)]) == 2
    assert "BIONEMO_RUNTIME='tensorrt': expected auto, a runtime, or model=runtime items (runtimes: onnxruntime" in (
        capsys.readouterr().err
    )


def test_a_lone_run_takes_every_core_and_busy_instances_share_them(tmp_path: Path) -> None:
    board = tmp_path / "board"
    first, second = CoreShare(4, board), CoreShare(4, board)
    with first.running() as alone:
        with second.running() as beside_a_busy_one:
            pass
    with second.running() as alone_again:
        pass
    assert (alone, beside_a_busy_one, alone_again) == (4, 2, 4)


def test_a_dead_instance_neither_holds_its_slot_nor_counts_as_busy(tmp_path: Path) -> None:
    board = tmp_path / "board"
    live = CoreShare(2, board)
    died = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; from bionemo_serving.runtimes.engines import "
         "CoreShare; share = CoreShare(2, Path(sys.argv[1])); share.running().__enter__(); print(share.slot)", str(board)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip  # it exits while busy, as a killed stub would
    assert died.stdout.strip() == "1", died.stderr
    with live.running() as threads:
        assert threads == 2
    assert CoreShare(2, board).slot == 1


def test_the_start_up_path_needs_neither_torch_nor_transformers() -> None:
    """The image installs the cpu lock, which has neither (nor scipy, which pycma imports where it is there): the
    launcher, the runtime timings and the service start without them (TorchScript is then left out of the timings as
    not installed)."""
    code = (
        "import sys\nfor name in ('torch', 'transformers', 'onnx', 'scipy'): sys.modules[name] = None\n"
        "import bionemo_serving.startup.launch, bionemo_serving.runtimes.choice, service\n"
        "from bionemo_serving.runtimes.engines import Runtime\nassert not Runtime.TORCHSCRIPT.installed()"
    )
    started = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert started.returncode == 0, started.stderr[-2000:]


@pytest.mark.e2e
def test_a_file_its_runtime_cannot_run_is_left_out_not_fatal(repository: Path) -> None:
    (repository / "esm2nv" / "1" / Runtime.OPENVINO.file("model")).write_text("not a model")
    choices = chosen(repository, {}, ["esm2nv"])
    record = json.loads((repository / "esm2nv" / RECORD).read_text())
    assert record["left_out"]["openvino"].startswith("does not run here") and choices["esm2nv"] is not Runtime.OPENVINO


def test_the_boards_of_ended_tritonservers_are_removed() -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    me = os.getpid()  # this process stands for a running server
    live = ProcessBoard.BOARDS / f"{CoreShare.PREFIX}{me}-{process_start(me)}"
    stale = [
        ProcessBoard.BOARDS / f"{CoreShare.PREFIX}{ended.stdout.strip()}-1",
        ProcessBoard.BOARDS / f"{CoreShare.PREFIX}{me}-{process_start(me) + 1}",  # an ended server whose pid is reused
        ProcessBoard.BOARDS / f"{CoreShare.PREFIX}{me}",  # named as before start times were
    ]
    for board in (live, *stale):
        board.write_bytes(bytes(16))
    ProcessBoard.remove_stale_boards(CoreShare.PREFIX)
    assert live.exists() and not any(board.exists() for board in stale)
    live.unlink()


def test_a_busy_slot_whose_pid_went_to_another_process_is_neither_busy_nor_held(tmp_path: Path) -> None:
    board = tmp_path / "board"
    killed, observer = CoreShare(2, board), CoreShare(2, board)
    killed.board.values[killed.slot] = 1.0  # a stub killed mid-run leaves itself marked busy...
    killed.board.started[killed.slot] -= 1  # ...and its pid may go to another process (here: this one)
    with observer.running() as threads:
        assert threads == 2
    assert CoreShare(2, board).slot == killed.slot


def test_freed_memory_goes_back_once_an_interval_and_after_the_last_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst of calls hands freed memory back at most once an interval, and what its last calls freed goes back an
    interval after the first hand-back though no call follows: an idle stub keeps none of its last second's buffers."""
    freed, hand_backs = FreedMemory(interval_s=0.3), []
    monkeypatch.setattr(freed, "_trim", lambda pad: hand_backs.append(time.monotonic()))
    for _ in range(5):
        freed.release()
    assert len(hand_backs) == 1
    time.sleep(0.6)
    assert len(hand_backs) == 2 and hand_backs[1] - hand_backs[0] >= 0.3
    time.sleep(0.4)
    assert len(hand_backs) == 2  # nothing freed since: no call, no hand-back


ARENA_PROBE = """
import sys
import numpy as np, psutil
from pathlib import Path
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from bionemo_serving.runtimes.engines import Arena, FreedMemory, Runtime, open_engine
from bionemo_serving.runtimes.choice import feeds_for

graph = Path(sys.argv[1])
engine = open_engine(Runtime.ONNXRUNTIME, graph, arena=Arena(sys.argv[2]))
config = text_format.Parse((graph.parent.parent / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
rng, freed = np.random.default_rng(0), FreedMemory(interval_s=0)

def run_mib(rows, tokens):
    engine.run([config.output[0].name], feeds_for(config, rows, tokens, rng), 1)
    freed.release()
    return psutil.Process().memory_info().rss / 2**20

before = run_mib(1, 8)
print(run_mib(8, 512) - before)
"""


@pytest.mark.e2e
def test_a_shrunk_arena_hands_back_what_a_run_used_where_a_kept_one_holds_it() -> None:
    """What the layers and contacts graphs rely on (Arena.SHRUNK): after one run of 8 rows of 512 tokens (esm2nv's
    attention maps alone are 20 MiB a row and layer), the kept arena holds the run's working set and the shrunk one
    hands it back; each in a fresh process, read once freed memory went back to the system."""
    graph = DEFAULT_REPOSITORY / "esm2nv" / "1" / "model.onnx"
    grown = {}
    for arena in (Arena.KEPT, Arena.SHRUNK):
        probe = subprocess.run(
            [sys.executable, "-c", ARENA_PROBE, str(graph), arena.value], cwd=ROOT,
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert probe.returncode == 0, probe.stderr[-2000:]
        grown[arena] = float(probe.stdout)
    assert grown[Arena.KEPT] > 100, grown
    assert grown[Arena.SHRUNK] < grown[Arena.KEPT] / 4, grown
