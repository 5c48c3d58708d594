"""The runtimes that can run a graph on CPU in the python backend, each from its own file.

The exporter writes each ONNX file of a graph once more per runtime it can
convert it for, each file held to the same parity gate; `bionemo_serving.runtimes.choice`
times them on the machine that serves and records the fastest in the model's
`config.pbtxt` (parameter `runtime`); the backend (`backends/stateless_graph.py` or
`backends/stateful_decoder.py`) opens that one. The exporter copies this file beside
each backend as `engines.py`, where nothing else of the project is installed: it
imports nothing of the project. A runtime's library is imported only when it is
opened, so a host needs only the runtimes it serves.

Every engine takes a thread count per run: both backends give a lone run every
core and each of several busy instances its share (CoreShare), unless the config
fixes `intra_op_threads`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import enum
import fcntl
import importlib.util
import json
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class Runtime(str, enum.Enum):
    """A way to run a graph; the value is what `config.pbtxt`, `BIONEMO_RUNTIME` and `GET /models` say."""

    ONNXRUNTIME = "onnxruntime"
    """The ONNX file every target serves: attention as separate MatMul, Softmax, MatMul over [rows, heads, L, L]."""
    ONNXRUNTIME_FUSED = "onnxruntime-fused"
    """An ONNX file whose attention is onnxruntime's fused MultiHeadAttention kernel."""
    TORCHSCRIPT = "torchscript"
    """The traced torch module: torch's fused scaled-dot-product attention."""
    OPENVINO = "openvino"
    """OpenVINO's IR converted from the torch module: its fused ScaledDotProductAttention."""

    def file(self, graph: str) -> str:
        """The file of graph `graph` (`model`, ...) for this runtime, beside the graph's `<graph>.onnx`."""
        return f"{graph}{_SUFFIXES[self]}"

    @property
    def library(self) -> str:
        """The module that must be importable to run it."""
        return _LIBRARIES[self]

    def installed(self) -> bool:
        return importlib.util.find_spec(self.library) is not None

    @property
    def maps_weights(self) -> bool:
        """Whether it runs on the weights where `model.weights` lies (SHARED_WEIGHTS): onnxruntime does; OpenVINO's
        CPU plugin and TorchScript copy them into each process (esm2nv's 150M encoder on OpenVINO: 1.6 GiB private
        for two thread counts' compiled models, against 0.4 GiB on onnxruntime)."""
        return self in (Runtime.ONNXRUNTIME, Runtime.ONNXRUNTIME_FUSED)

    @property
    def chosen_by_timing(self) -> bool:
        """Whether the timings may choose it; TorchScript only runs where BIONEMO_RUNTIME asks: a python-backend stub
        that has loaded torch failed tests/e2e/test_faults_e2e.py's SIGTERM drain (every /generate in flight got a 503
        and the stubs outlived the server), which onnxruntime and OpenVINO pass."""
        return self is not Runtime.TORCHSCRIPT


_SUFFIXES = {
    Runtime.ONNXRUNTIME: ".onnx",
    Runtime.ONNXRUNTIME_FUSED: ".fused.onnx",
    Runtime.TORCHSCRIPT: ".torchscript.pt",
    Runtime.OPENVINO: ".openvino.xml",
}
_LIBRARIES = {
    Runtime.ONNXRUNTIME: "onnxruntime",
    Runtime.ONNXRUNTIME_FUSED: "onnxruntime",
    Runtime.TORCHSCRIPT: "torch",
    Runtime.OPENVINO: "openvino",
}


RECORD = "runtime.json"
"""The timings of a graph's runtimes on the machine that last timed them, beside its config.pbtxt
(bionemo_serving.runtimes.choice); a new export of the graph removes them."""
RUNTIME_PARAMETER = "runtime"
"""The config parameter naming the runtime a backend opens (bionemo_serving/runtimes/record.py writes it)."""


SHARED_WEIGHTS = "model.weights"
"""The file of every tensor of a model version's ONNX files, hardlinked into each of its graphs' version folders
(bionemo_serving/exporter/shared_weights.py): all graphs and instances map the same pages."""
MAPPED_FROM_MIB = 256
"""Weights of at least this size run where they lie: onnxruntime's prepacking would copy every matrix into each
session's heap (two sessions per stub, a stub per instance and graph: esm2nv at 150M held 12.6 copies), and a
runtime that copies them is not timed (runtimes/choice.py). Smaller ones are prepacked, faster on short inputs in one
process alone: esm2nv 8M unpacked ran 1 x 16 tokens 1.83x and 1 x 64 1.23x slower, 8 x 256 1.02x; at 150M (the
runtime timings, one thread) 1 x 64 1.33x, 8 x 256 1.02x, INT8 1 x 64 1.11x. Two instances at once turn it round at
150M: each ran 1 x 128 at 216-220 tokens/s mapped, 125-127 prepacked (each streaming its own copy), 8 x 128 at 232-237
against 246-247 (AMD EPYC, AVX2)."""


def weights_mapped(version_dir: Path) -> bool:
    """Whether the graph in `version_dir` runs on its weights where they lie, shared by every stub (MAPPED_FROM_MIB)."""
    weights = version_dir / SHARED_WEIGHTS
    return weights.is_file() and weights.stat().st_size >= MAPPED_FROM_MIB * 2**20


class Engine(Protocol):
    def run(self, outputs: list[str], feeds: dict[str, np.ndarray], threads: int) -> list[np.ndarray]:
        """`outputs` of one batch, computed on `threads` threads."""
        ...


PROVIDER_OPTIONS: dict[str, dict[str, str]] = {"CUDAExecutionProvider": {"use_tf32": "0"}}
"""Options of an execution provider, the same in the exporter's gate and in the backend: FP32 means FP32, and
onnxruntime's CUDA provider runs float32 matmuls in TF32 unless told not to (operations/tools/gpu_gate.py measures both)."""


class UnavailableProvider(RuntimeError):
    """The config names an execution provider this onnxruntime lacks: refused, never run elsewhere instead."""


class Arena(str, enum.Enum):
    """What onnxruntime's CPU arena does with the memory a run used (config.pbtxt's `arena`, from model_catalog's
    graph description; the other runtimes manage their own)."""

    KEPT = "kept"
    """Kept for the next run: a graph whose shapes recur levels off at its largest working set (run_in_pieces bounds
    it) and runs fastest. The encoders and the language model, asked for all the time."""
    SHRUNK = "shrunk"
    """Its extensions handed back after every run: a graph asked for now and then holds what it works on, not its
    largest working set for good, and no rarer batch can step it up. In-process over the service's batch shapes,
    esm2nv's layers graph ended at 356 MiB instead of 720, 5 % slower, and its contacts graph at 928 MiB instead of
    1,929, 9 % slower; without an arena they ran 23 and 43 % slower (Intel Xeon, docs/reliability.md)."""
    OFF = "off"
    """No arena: buffers come from malloc and go back to it (FreedMemory hands them to the system). The cached
    decoder's steps meet a new shape at nearly every call, and buffers of ever-new sizes fragment an arena."""


def open_engine(
    runtime: Runtime, path: Path, provider: str = "CPUExecutionProvider", arena: Arena = Arena.KEPT
) -> Engine:
    """An engine for the file `path` (`runtime.file(...)`); `provider` is onnxruntime's, where it runs, and `arena`
    what its CPU arena keeps."""
    if runtime in (Runtime.ONNXRUNTIME, Runtime.ONNXRUNTIME_FUSED):
        return OnnxRuntimeEngine(path, provider, arena)
    if runtime is Runtime.TORCHSCRIPT:
        return TorchScriptEngine(path)
    return OpenVinoEngine(path)


class OnnxRuntimeEngine:
    """onnxruntime fixes a session's threads when it is created: one session per thread count asked for.

    With `Arena.OFF`: MegaMolBART's decoder stub stepped up with its arena for as long as it met new shapes
    (in-process, 200 generations of 1-32 rows: 181.2 -> 185.5 MiB, still rising; `make test`'s check in CI: +10.5 %
    in five rounds), and without it held 137.0 -> 138.4 MiB, 47 MiB lower, 3-6 % slower (AMD EPYC,
    docs/reliability.md)."""

    def __init__(self, path: Path, provider: str, arena: Arena = Arena.KEPT) -> None:
        import onnxruntime

        if provider not in onnxruntime.get_available_providers():
            raise UnavailableProvider(
                f"{path}: the config asks for {provider}, which this onnxruntime ({onnxruntime.__version__}) lacks; "
                f"it has {', '.join(onnxruntime.get_available_providers())}"
            )
        self.onnxruntime, self.path, self.provider, self.arena = onnxruntime, path, provider, arena
        self.sessions: dict[int, Any] = {}
        self.run_options = onnxruntime.RunOptions()
        if arena is Arena.SHRUNK:
            self.run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def session(self, threads: int) -> Any:
        if threads not in self.sessions:
            options = self.onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            options.enable_cpu_mem_arena = self.arena is not Arena.OFF
            if weights_mapped(self.path.parent):  # mapped from model.weights, unpacked: one copy for every stub
                options.add_session_config_entry("session.disable_prepacking", "1")
            provider = (self.provider, PROVIDER_OPTIONS.get(self.provider, {}))
            self.sessions[threads] = self.onnxruntime.InferenceSession(str(self.path), options, providers=[provider])
        return self.sessions[threads]

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray], threads: int) -> list[np.ndarray]:
        return self.session(threads).run(outputs, feeds, self.run_options)


TORCHSCRIPT_NAMES = "tensor_names.json"
"""The extra file of a TorchScript graph that names its inputs and outputs in order (a trace keeps no names)."""


class TorchScriptEngine:
    """torch takes a new thread count at any call.

    Runs unfused: by default TorchScript's profiling executor compiles fused kernels for each new set of input shapes
    (up to 2 static and 10 dynamic ones per graph), seconds apiece, and keeps them. MegaMolBART's decoder, whose steps
    meet a new shape at nearly every call, took 540 s for its first 110 generations and its stub stepped up 6.5 % in a
    10-minute soak; with no fused specialisation (`torch.jit.set_fusion_strategy`, process-wide: a stub runs one model)
    it ran 150 generations in 19-24 s, flat, and esm2nv's encoder timed the same or faster (AMD EPYC;
    docs/reliability.md).
    """

    def __init__(self, path: Path) -> None:
        import torch

        self.torch = torch
        torch.jit.set_fusion_strategy([("DYNAMIC", 0)])
        names = {TORCHSCRIPT_NAMES: ""}
        self.module = torch.jit.load(str(path), _extra_files=names).eval()
        tensors = json.loads(names[TORCHSCRIPT_NAMES])
        self.inputs: list[str] = tensors["inputs"]
        self.outputs: list[str] = tensors["outputs"]

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray], threads: int) -> list[np.ndarray]:
        if self.torch.get_num_threads() != threads:
            self.torch.set_num_threads(threads)
        with self.torch.inference_mode():
            results = self.module(*(self.torch.from_numpy(feeds[name]) for name in self.inputs))
        if isinstance(results, self.torch.Tensor):  # a graph of one output returns it alone, not in a tuple
            results = (results,)
        return [results[self.outputs.index(name)].numpy() for name in outputs]


OPENVINO_SHAPE_CACHE = 16
"""Input shapes whose prepared kernels OpenVINO's CPU plugin keeps for a compiled model (`CPU_RUNTIME_CACHE_CAPACITY`,
5000 by default). A dynamic graph meets a new shape at nearly every call (the incremental decoder: rows, cache length and
source width all vary), and each kept entry held memory for good: MegaMolBART's decoder stub grew for as long as it
served (`make soak`). esm2nv's encoder ran 200 batches of 21 widths x 8 batch sizes as fast with 16 as with 64
(3,517-3,564 and 3,559-3,590 tokens/s, the same memory; AMD EPYC, docs/reliability.md)."""

ONEDNN_PRIMITIVE_CACHE = 64
"""Kernels that oneDNN, inside OpenVINO's CPU plugin, keeps in its one cache per process
(`ONEDNN_PRIMITIVE_CACHE_CAPACITY`, 1024 by default), apart from the plugin's per-shape cache: a new shape's kernels
are new primitives, and 1024 of them held the decoder stub 60-80 MiB above its level after the plugin's cache was
capped (make test's check in CI, +11.6 %). With 64, and 16 shapes kept by the plugin, the decoder ran 500 generations
in-process flat within 4 %, in the same time (AMD EPYC); a user's own setting of the variable is kept."""


class OpenVinoEngine:
    """OpenVINO fixes a compiled model's threads: one compiled model per thread count asked for."""

    def __init__(self, path: Path) -> None:
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_PRIMITIVE_CACHE))  # read at first use
        import openvino

        self.core = openvino.Core()
        self.model = self.core.read_model(str(path))
        self.compiled: dict[int, Any] = {}

    def request(self, threads: int) -> Any:
        if threads not in self.compiled:
            compiled = self.core.compile_model(
                self.model,
                "CPU",
                # FP32 means FP32: on CPUs with bf16 or fp16 units OpenVINO would otherwise compute in them. No pinning:
                # OpenVINO pins its threads to the first cores, so every instance's stub sat on the same one (two
                # instances of one thread each answered /embed at half the rate of one instance on both cores).
                {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
                 "ENABLE_CPU_PINNING": False, "CPU_RUNTIME_CACHE_CAPACITY": OPENVINO_SHAPE_CACHE},
            )
            self.compiled[threads] = compiled.create_infer_request()
        return self.compiled[threads]

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray], threads: int) -> list[np.ndarray]:
        request = self.request(threads)
        request.infer(feeds, share_inputs=True)  # reads the arrays where they lie: the decoder's caches, uncopied
        return [request.get_tensor(name).data.copy() for name in outputs]


class FreedMemory:
    """Hands the memory a runtime has freed back to the system after a call, at most once every `interval_s`; a call
    within the interval sets a hand-back for when it ends, so that what the last calls of a burst freed goes back
    though no call follows (an idle stub holds what it holds, not its last second's buffers).

    A runtime that meets ever-new shapes allocates and frees buffers of ever-new sizes; glibc keeps what is freed in
    its arenas (one per thread that allocated), and a stub's resident memory then rose with every new size, though
    the runtime held no more: 45-50 MiB of MegaMolBART's decoder stub on OpenVINO after 300 generations, which
    `malloc_trim(0)` returned. Where the C library has no malloc_trim (not glibc), nothing is done.
    """

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self._next = 0.0
        self._lock = threading.Lock()
        self._pending: threading.Timer | None = None
        libc = ctypes.util.find_library("c")
        self._trim = getattr(ctypes.CDLL(libc), "malloc_trim", None) if libc else None

    def release(self) -> None:
        if self._trim is None:
            return
        with self._lock:
            wait = self._next - time.monotonic()
            if wait <= 0:
                self._hand_back()
            elif self._pending is None:
                self._pending = threading.Timer(wait, self._deferred)
                self._pending.daemon = True
                self._pending.start()

    def _deferred(self) -> None:
        with self._lock:
            self._pending = None
            self._hand_back()

    def _hand_back(self) -> None:
        self._trim(0)
        self._next = time.monotonic() + self.interval_s


def thread_allotment(intra_op_threads: int) -> Callable[[], AbstractContextManager[int]]:
    """What gives a run its threads, from a config's `intra_op_threads`: that many, or with 0 a share of the cores
    (CoreShare) among the busy instances of this tritonserver, encoders and decoder alike."""
    if intra_op_threads:
        return lambda: contextlib.nullcontext(intra_op_threads)
    return CoreShare(len(os.sched_getaffinity(0))).running


def run_in_pieces(
    engine: Engine,
    outputs: list[str],
    feeds: dict[str, np.ndarray],
    attention_budget: int,
    threads: Callable[[], AbstractContextManager[int]],
) -> dict[str, np.ndarray]:
    """`outputs` of one batch, run in pieces of at most `attention_budget` rows x tokens² (the second axis of the
    inputs), each on the threads `threads()` gives as it starts: a runtime's arena keeps the largest working set it
    has met, so one merged batch of long rows would otherwise hold gigabytes for good (docs/reliability.md)."""
    batch = next(iter(feeds.values()))
    tokens = batch.shape[1] if batch.ndim > 1 else 1
    rows = max(1, attention_budget // tokens**2)
    pieces = []
    for start in range(0, len(batch), rows):
        with threads() as count:
            pieces.append(engine.run(outputs, {name: array[start : start + rows] for name, array in feeds.items()}, count))
    if len(pieces) == 1:
        return dict(zip(outputs, pieces[0]))
    return {name: np.concatenate([piece[index] for piece in pieces]) for index, name in enumerate(outputs)}


class ProcessBoard:
    """A small board in /dev/shm shared by the sibling processes of one parent (the python-backend stubs of one
    tritonserver, the API workers of one `bentoml serve`), named after the parent: each process owns a slot holding
    its identity and one number it publishes, claimed under a file lock; a dead owner's slot is free, and its number
    no longer counts. A process is its pid and its start time: pids are reused (pid_max is 32768 on many hosts), and
    a reused pid taken for a stub killed while busy would halve every lone request for the rest of the server's life.
    """

    SLOTS = 256
    SLOT_BYTES = 8 + 4 + 8
    """Owner's start time (int64), owner's pid (int32), the number it publishes (float64)."""

    BOARDS = Path("/dev/shm")

    def __init__(self, prefix: str, board: Path | None = None) -> None:
        """`prefix`: the board's kind, before its parent's pid and start time; `board`: a path of its own instead."""
        if board is None:
            self.remove_stale_boards(prefix)
        parent = os.getppid()
        path = board or self.BOARDS / f"{prefix}{parent}-{process_start(parent)}"
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            if os.fstat(descriptor).st_size < self.SLOTS * self.SLOT_BYTES:
                os.ftruncate(descriptor, self.SLOTS * self.SLOT_BYTES)
            self.board = mmap.mmap(descriptor, self.SLOTS * self.SLOT_BYTES)
            self.started = memoryview(self.board)[: self.SLOTS * 8].cast("q")
            self.owners = memoryview(self.board)[self.SLOTS * 8 : self.SLOTS * 12].cast("i")
            self.values = memoryview(self.board)[self.SLOTS * 12 :].cast("d")
            self.slot = next(slot for slot in range(self.SLOTS) if not self._owner_alive(slot))
            me = os.getpid()
            self.owners[self.slot], self.started[self.slot], self.values[self.slot] = me, process_start(me), 0.0
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
            os.close(descriptor)

    @classmethod
    def remove_stale_boards(cls, prefix: str) -> None:
        """The boards of parents that have ended (each leaves one behind; nothing else would remove it)."""
        for board in cls.BOARDS.glob(f"{prefix}*"):
            pid, _, started = board.name.removeprefix(prefix).partition("-")
            if not (pid.isdigit() and started.isdigit() and process_start(int(pid)) == int(started)):
                board.unlink(missing_ok=True)

    def _owner_alive(self, slot: int) -> bool:
        return self.owners[slot] > 0 and process_start(self.owners[slot]) == self.started[slot]

    def publish(self, value: float) -> None:
        self.values[self.slot] = value

    def others(self) -> list[float]:
        """The non-zero numbers the other live owners publish."""
        return [
            self.values[slot]
            for slot in range(self.SLOTS)
            if slot != self.slot and self.values[slot] and self._owner_alive(slot)
        ]


class CoreShare:
    """How many threads a run gets: the cores, shared among the instances of this tritonserver running a batch now.

    A lone request runs on every core; under load each busy instance gets its share, so instances never
    oversubscribe the cores (two instances of two spinning threads halved throughput on 2 cores), except for the
    rest of a run that started alone when another instance starts. The instances' python-backend stubs are
    processes of one tritonserver: each publishes on its board (ProcessBoard) whether it is busy.
    """

    PREFIX = "bionemo-cores-"

    def __init__(self, cores: int, board: Path | None = None) -> None:
        self.cores = cores
        self.board = ProcessBoard(self.PREFIX, board)

    @property
    def slot(self) -> int:
        return self.board.slot

    @contextlib.contextmanager
    def running(self) -> Iterator[int]:
        """Mark this instance busy for the block; yields its thread count, read as the block starts."""
        self.board.publish(1.0)
        try:
            yield max(1, self.cores // (1 + len(self.board.others())))
        finally:
            self.board.publish(0.0)


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat's 22nd field); None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[19])
