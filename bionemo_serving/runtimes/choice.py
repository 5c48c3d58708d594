"""Which runtime runs each graph: timed on the machine that serves.

    python -m bionemo_serving.runtimes.choice [--repository model_repository] [--write-configs]

The exporter writes each graph once per runtime it can convert it for, every
file held to the same parity gate (bionemo_serving/exporter/runtime_export.py). Which is fastest
depends on the CPU: on an Intel Xeon (AVX-512) onnxruntime's unfused attention
ran 8 proteins of 512 residues 2x slower than torch's fused kernel. So before
tritonserver starts, `python -m bionemo_serving.startup.launch` (and `make models`, after an
export) times every runtime that is installed and exported on the graph's own
shapes, on the threads one instance runs with under load: an encoder on its
length buckets up to its longest input, one row and up to eight; the cached
decoder on whole generations of one row and of a batch of decodings, the
cross-attention and every step with its caches growing, each run meeting
shapes new to the runtime as serving does. What to time is read from each graph's
config, as the exporter wrote it (TIMING_PARAMETER, MODEL_PARAMETER, MAX_TOKENS_PARAMETER,
the parts' files): nothing here depends on the model catalog. The timings are kept beside each
config (`runtime.json`); a start serves its choice from a folder of its own,
each config naming the runtime (parameter `runtime`, which the backend opens)
and its timings (`GET /models` shows them): bionemo_serving/runtimes/served_repository.py.
This command times and keeps the timings (`make models` runs it after an export);
with `--write-configs` it also writes the choice into the repository's own
configs, for a repository served elsewhere without timing (S3). A choice is timed
again only when it was made on another CPU, with other threads, for another
version or set of runtimes, or a new export removed the record.
`BIONEMO_RUNTIME` forces a runtime instead; the timings stay as measured.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psutil
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from bionemo_serving.runtimes.engines import RECORD, Arena, Engine, FreedMemory, Runtime, open_engine, weights_mapped
from bionemo_serving.runtimes.record import RuntimeRecord
from bionemo_serving.runtimes.step_caches import layer_caches

MODEL_PARAMETER = "catalog_model"
"""The config parameter naming the catalogued model a graph belongs to: what BIONEMO_RUNTIME names."""
TIMING_PARAMETER = "timed_on"
"""The config parameter saying how a graph is timed, TOKEN_BATCHES or GENERATIONS; a graph without it runs
onnxruntime untimed (one asked for rarely: timing it would add a minute to every start on a new machine)."""
TOKEN_BATCHES, GENERATIONS = "token batches", "generations"
MAX_TOKENS_PARAMETER = "max_tokens"
"""The config parameter giving the most tokens one row of a token-batch graph may have, special tokens included."""
PART_FILE_SUFFIX = "_file"
"""Each ONNX part of a graph is named by a config parameter `<part>_file` (the backends open them the same way)."""

SHORTEST_TOKENS, MIDDLE_TOKENS = 64, 256
MOST_ROWS = 8
"""Rows of the largest batch timed: what requests of 1-8 sequences merge into, in a bounded time."""
DECODER_ROWS, GENERATED_TOKENS, SOURCE_TOKENS = (1, 16), 100, 60
"""The decoder's generations timed: one decoding and a batch of them in flight, of GENERATED_TOKENS tokens each, from
sources of about 60 tokens (a drug-like SMILES)."""
WARM_UP_RUNS, TIMED_RUNS = 2, 2
"""Runs per shape: the warm-up (TorchScript's profiling executor optimises a graph at its second run), then the timed
ones, one per round of all runtimes, of which the fastest counts (the others met a busy machine)."""
LONG_ROUND_S = 30.0
"""Where a runtime's warm-up round (all its work once) took longer, every runtime is timed in one round, not
TIMED_RUNS: esm2nv at 650M on one thread takes 75 s a round, and four rounds of two runtimes and two graphs would
keep `runtimes.choice` at it for 20 minutes. The warm-up keeps its two rounds: warmed once, both runtimes of the 650M
encoder grew by 111 and 138 MiB over their timed round (onnxruntime settles a shape's memory at its second run), and
neither could be chosen."""
GROWTH_LIMIT_MIB = 8.0
"""Most a runtime's memory may grow over its timed runs, which repeat shapes it has met (an encoder) or meet new ones
as serving does (the decoder), and still be chosen: a runtime that keeps megabytes per run would grow for as long as
it served. onnxruntime with its arena moved by up to 2.1 MiB over the decoder's timed generations. Growth by
kilobytes per shape is below what seconds of timing can see: `make soak` measures that."""
METHOD = 4
"""1: the decoder timed on isolated steps; 2: on whole generations, the memory each runtime grew by recorded; 3: the
runtimes' timed runs interleaved; 4: TorchScript, which the timings never choose, no longer timed."""
NOT_TIMED = "not timed: it runs only where BIONEMO_RUNTIME names it"
"""Why a runtime available here has no timings (Runtime.chosen_by_timing): timing it would only slow the start."""
COPIES_WEIGHTS = (
    "not timed: it would copy the weights into every stub, which the graphs of this model share where they lie "
    "(bionemo_serving/runtimes/engines.py MAPPED_FROM_MIB); it runs only where BIONEMO_RUNTIME names it"
)
"""Why a runtime that copies the weights is not timed for a graph whose weights are mapped (Runtime.maps_weights)."""
TOKEN_IDS = (4, 24)
"""Token ids of the timed rows, drawn from this range, which every catalogued vocabulary holds (the smallest, ESM's,
has 33): the time a graph takes does not depend on which tokens it reads."""


RUNTIME_VARIABLE = "BIONEMO_RUNTIME"
"""The runtimes forced instead of timed: read here by the command, and by the service's settings."""
FORCED_RUNTIMES_FORM = "auto, a runtime, or model=runtime items"


class RuntimeChoiceError(ValueError):
    """A forced runtime that cannot serve the model here: not exported for it, or its library not installed."""


def forced_runtimes(raw: str, models: Collection[str]) -> dict[str, Runtime]:
    """BIONEMO_RUNTIME's value as model name -> runtime, for the model names `models`: `auto` (or nothing): {}; one
    runtime for every model; or `model=runtime` items separated by commas. A ValueError names the models and runtimes
    known."""
    raw = raw.strip()
    if raw in ("", "auto"):
        return {}
    known = f"runtimes: {', '.join(runtime.value for runtime in Runtime)}"
    if "=" not in raw:
        if raw not in Runtime._value2member_map_:
            raise ValueError(known)
        return {name: Runtime(raw) for name in models}
    chosen = {}
    for item in raw.split(","):
        name, _, runtime = (part.strip() for part in item.partition("="))
        if name not in models or runtime not in Runtime._value2member_map_:
            raise ValueError(f"{item.strip()!r}; models: {', '.join(models)}; {known}")
        chosen[name] = Runtime(runtime)
    return chosen


@dataclass(frozen=True)
class Timings:
    """How long each runtime took on each shape, on one CPU, with the threads of one instance under load."""

    cpu: str
    threads: int
    version: int
    milliseconds: dict[str, dict[str, float]]
    """Runtime value -> its time on each batch shape: `<rows>x<tokens>` (an encoder), `generation <rows>x<tokens>`
    (the decoder: a whole generation of that many rows and tokens)."""
    grown_mib: dict[str, float]
    """Runtime value -> how much the process's memory grew over its timed runs, after its warm-up ones."""
    left_out: dict[str, str]
    """Runtime value -> why it was not timed."""
    method: int
    """How the timings were taken (METHOD): a record taken another way is timed again."""

    def measured_for(self) -> tuple[str, int, int, set[str], int]:
        """What the timings hold for: the CPU, the threads, the version, the runtimes available then and the way they
        were timed."""
        return self.cpu, self.threads, self.version, set(self.milliseconds), self.method

    def totals(self) -> dict[str, float]:
        return {runtime: round(sum(times.values()), 1) for runtime, times in self.milliseconds.items()}

    def eligible(self, runtime: str) -> bool:
        """Whether timing may choose `runtime`: one whose memory grew over GROWTH_LIMIT_MIB in its timed runs may
        not."""
        return self.grown_mib.get(runtime, 0.0) <= GROWTH_LIMIT_MIB

    def can_run(self, runtime: Runtime) -> bool:
        """Whether BIONEMO_RUNTIME may force `runtime`: it ran in the timings, or it is available here but never timed
        (TorchScript)."""
        return runtime.value in self.milliseconds or self.left_out.get(runtime.value) in (NOT_TIMED, COPIES_WEIGHTS)

    def fastest(self) -> Runtime:
        """The runtime of the smallest total among the eligible; onnxruntime where none ran (Triton's load then fails,
        saying why)."""
        totals = {runtime: total for runtime, total in self.totals().items() if self.eligible(runtime)}
        return Runtime(min(totals, key=totals.__getitem__)) if totals else Runtime.ONNXRUNTIME


def cpu_model() -> str:
    """/proc/cpuinfo's model name: what the timings hold for."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown CPU")


@dataclass(frozen=True)
class TimedWork:
    """What each runtime runs and is timed on: `run(engines, threads)`, its engines by graph part (the ONNX parts
    its config names), under the name `shape` in the record."""

    shape: str
    run: Callable[[Mapping[str, Engine], int], object]


def timing_shapes(config: model_config_pb2.ModelConfig) -> list[tuple[int, int]]:
    """One row and up to MOST_ROWS (within max_batch_size and attention_budget), at short, middle and the longest
    token widths the model accepts: the shapes the length buckets send."""
    longest = int(config.parameters[MAX_TOKENS_PARAMETER].string_value)
    budget = int(config.parameters["attention_budget"].string_value)
    shapes = []
    for tokens in sorted({min(width, longest) for width in (SHORTEST_TOKENS, MIDDLE_TOKENS, longest)}):
        most = max(1, min(MOST_ROWS, config.max_batch_size, budget // tokens**2))
        shapes += [(1, tokens)] + ([(most, tokens)] if most > 1 else [])
    return shapes


def feeds_for(
    config: model_config_pb2.ModelConfig, rows: int, tokens: int, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """A batch of `rows` random rows of `tokens` tokens for the inputs the config names: every token real (the
    masks all ones); for the language model, each row asks for the log-probabilities of one position, as a scan's
    masked copies do."""
    feeds = {}
    for tensor in config.input:
        if tensor.name == "input_ids":
            feeds[tensor.name] = rng.integers(*TOKEN_IDS, size=(rows, tokens))
        elif tensor.name == "positions":
            feeds[tensor.name] = rng.integers(tokens, size=(rows, 1))
        else:
            feeds[tensor.name] = np.ones((rows, tokens), dtype=np.int64)
    return feeds


def token_batches(config: model_config_pb2.ModelConfig) -> list[TimedWork]:
    """The timing_shapes of a graph of token rows (the encoder, the language model), asking for the config's first
    output, what the service asks most."""
    rng = np.random.default_rng(0)
    (part,) = parts_of(config)
    output = config.output[0].name

    def batch(feeds: dict[str, np.ndarray]) -> Callable[[Mapping[str, Engine], int], object]:
        return lambda engines, threads: engines[part].run([output], feeds, threads)

    return [
        TimedWork(f"{rows}x{tokens}", batch(feeds_for(config, rows, tokens, rng))) for rows, tokens in timing_shapes(config)
    ]


def decoder_generations(config: model_config_pb2.ModelConfig) -> list[TimedWork]:
    """Whole generations of the incremental decoder, as serving runs them: the cross-attention of random sources, then
    GENERATED_TOKENS steps, each appending its keys and values to caches that double as the backend's do
    (runtimes/backends/stateful_decoder.py). Each run's sources are one token narrower than the last run's, so
    every run meets cache shapes new to the runtime, as serving's ever-different molecules do: a runtime that
    prepares kernels per shape pays for it here, not only in serving."""
    rng = np.random.default_rng(0)
    hidden_size = next(tensor.dims[-1] for tensor in config.input if tensor.name == "encoder_hidden_states")
    vocab_size = config.output[0].dims[-1]
    widths = itertools.count(SOURCE_TOKENS, -1)

    def generation(rows: int) -> Callable[[Mapping[str, Engine], int], object]:
        def run(engines: Mapping[str, Engine], threads: int) -> None:
            sources = rng.standard_normal((rows, next(widths), hidden_size)).astype(np.float32)
            (cross_kv,) = engines["cross_attention"].run(["cross_kv"], {"encoder_hidden_states": sources}, threads)
            caches = layer_caches(np.zeros((rows, *cross_kv.shape[1:4], 1, cross_kv.shape[5]), np.float32), cross_kv)
            masks = {"self_mask": np.zeros((rows, 1), np.int64), "encoder_mask": np.ones(sources.shape[:2], np.int64)}
            for position in range(GENERATED_TOKENS):
                if position == masks["self_mask"].shape[1]:  # full: twice the positions, as the backend grows them
                    masks["self_mask"] = np.pad(masks["self_mask"], ((0, 0), (0, position)))
                    for name in (name for name in caches if name.startswith("self_")):
                        caches[name] = np.pad(caches[name], ((0, 0), (0, 0), (0, position), (0, 0)))
                step = {"token": rng.integers(vocab_size, size=rows), "position": np.full(rows, position)}
                _, token_kv = engines["step"].run(["logits", "token_kv"], step | masks | caches, threads)
                for layer in range(token_kv.shape[1]):
                    caches[f"self_keys_{layer}"][:, :, position] = token_kv[:, layer, 0, :, 0]
                    caches[f"self_values_{layer}"][:, :, position] = token_kv[:, layer, 1, :, 0]
                masks["self_mask"][:, position] = 1

        return run

    return [TimedWork(f"generation {rows}x{GENERATED_TOKENS}", generation(rows)) for rows in DECODER_ROWS]


def parts_of(config: model_config_pb2.ModelConfig) -> tuple[str, ...]:
    """The ONNX parts of a graph, as its config names their files (`model`; the decoder's `cross_attention`, `step`)."""
    return tuple(key.removesuffix(PART_FILE_SUFFIX) for key in sorted(config.parameters) if key.endswith(PART_FILE_SUFFIX))


def timeable(version_dir: Path, parts: tuple[str, ...]) -> tuple[dict[Runtime, dict[str, Path]], dict[str, str]]:
    """The runtimes the timings may choose that are exported into `version_dir` for every one of a graph's `parts`
    and installed here, with each part's file; why each other runtime is not timed."""
    files, left_out = {}, {}
    for runtime in Runtime:
        paths = {part: version_dir / runtime.file(part) for part in parts}
        missing = [path.name for path in paths.values() if not path.is_file()]
        if missing:
            left_out[runtime.value] = f"not exported ({', '.join(missing)} missing)"
        elif not runtime.installed():
            left_out[runtime.value] = f"{runtime.library} is not installed"
        elif not runtime.chosen_by_timing:
            left_out[runtime.value] = NOT_TIMED
        elif not runtime.maps_weights and weights_mapped(version_dir):
            left_out[runtime.value] = COPIES_WEIGHTS
        else:
            files[runtime] = paths
    return files, left_out


def measure(folder: ModelFolder, config: model_config_pb2.ModelConfig, version_dir: Path, threads: int) -> Timings:
    """Time every runtime in `version_dir` the timings may choose (timeable): WARM_UP_RUNS of all its work, then
    TIMED_RUNS rounds, each of which runs every runtime's work in turn, so that a spell of load from elsewhere slows
    every runtime rather than the one it met (a clean clone's timings, taken while a test loaded the machine, once
    gave onnxruntime 233 ms for a one-row generation that takes 55-73 ms); one round of each where a round is long
    (LONG_ROUND_S). Each work's fastest run counts; a runtime's memory growth is summed
    over its timed runs (freed memory handed back before each reading, as the backends do)."""
    work = decoder_generations(config) if folder.timed_on == GENERATIONS else token_batches(config)
    files, left_out = timeable(version_dir, folder.parts)
    engines: dict[str, Mapping[str, Engine]] = {}
    longest_round = 0.0
    for runtime, paths in files.items():
        try:
            engines[runtime.value] = {
                part: open_engine(runtime, path, arena=folder.arena) for part, path in paths.items()
            }
            for _ in range(WARM_UP_RUNS):
                started = time.perf_counter()
                for each in work:
                    each.run(engines[runtime.value], threads)
                longest_round = max(longest_round, time.perf_counter() - started)
        except Exception as error:  # noqa: BLE001 - a file its runtime cannot run is left out; Triton's load says why
            engines.pop(runtime.value, None)
            left_out[runtime.value] = f"does not run here ({type(error).__name__})"
    durations = {runtime: {each.shape: [] for each in work} for runtime in engines}
    grown = dict.fromkeys(engines, 0.0)
    for _ in range(1 if longest_round > LONG_ROUND_S else TIMED_RUNS):
        for runtime, parts in engines.items():
            before = _resident_mib()
            for each in work:
                started = time.perf_counter()
                each.run(parts, threads)
                durations[runtime][each.shape].append(time.perf_counter() - started)
            grown[runtime] += _resident_mib() - before
    milliseconds = {
        runtime: {shape: round(1000 * min(times), 2) for shape, times in shapes.items()}
        for runtime, shapes in durations.items()
    }
    grown_mib = {runtime: round(mib, 1) for runtime, mib in grown.items()}
    return Timings(cpu_model(), threads, int(version_dir.name), milliseconds, grown_mib, left_out, METHOD)


def _resident_mib() -> float:
    FreedMemory(interval_s=0).release()
    return psutil.Process().memory_info().rss / 2**20


@dataclass(frozen=True)
class ModelFolder:
    """A timed graph's folder in a local repository: what its config says to time, its newest version and the
    timings recorded beside it."""

    path: Path
    model: str
    """The catalogued model the graph belongs to (MODEL_PARAMETER)."""
    timed_on: str
    """TOKEN_BATCHES or GENERATIONS."""
    parts: tuple[str, ...]
    arena: Arena

    @classmethod
    def of(cls, path: Path) -> ModelFolder | None:
        """The timed graph in folder `path`; None where there is no config or version, or the config times nothing."""
        config_path = path / "config.pbtxt"
        if not config_path.is_file() or not any(entry.name.isdigit() for entry in path.iterdir()):
            return None
        config = text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())
        if TIMING_PARAMETER not in config.parameters:
            return None
        parameters = {key: value.string_value for key, value in config.parameters.items()}
        arena = Arena(parameters.get("arena", Arena.KEPT.value))
        return cls(path, parameters[MODEL_PARAMETER], parameters[TIMING_PARAMETER], parts_of(config), arena)

    @property
    def config_path(self) -> Path:
        return self.path / "config.pbtxt"

    def read_config(self) -> tuple[list[str], model_config_pb2.ModelConfig]:
        """The config's comment header (kept when it is written again) and the config."""
        text = self.config_path.read_text()
        header = [line for line in text.splitlines() if line.startswith("#")]
        return header, text_format.Parse(text, model_config_pb2.ModelConfig())

    def newest_version(self) -> Path:
        return max((entry for entry in self.path.iterdir() if entry.name.isdigit()), key=lambda entry: int(entry.name))

    def recorded(self) -> Timings | None:
        try:
            record = json.loads((self.path / RECORD).read_text())
            return Timings(**record)
        except (OSError, ValueError, TypeError):
            return None

    def record(self, timings: Timings) -> None:
        """Keep `timings` beside the config, so that the next start on this machine need not time again; a
        repository it cannot write to (a read-only bento) is timed again at each start."""
        try:
            (self.path / RECORD).write_text(json.dumps(asdict(timings), indent=2) + "\n")
        except OSError:
            pass


@dataclass(frozen=True)
class Choice:
    """The runtime one graph runs, why, and the timings it was chosen from."""

    folder: ModelFolder
    runtime: Runtime
    timings: Timings
    chosen_by: str
    """`measurement` or `BIONEMO_RUNTIME`."""

    def runtime_record(self) -> RuntimeRecord:
        """The choice as the config records it."""
        return RuntimeRecord(
            self.folder.path.name, self.runtime.value, self.chosen_by, self.timings.cpu, self.timings.threads,
            self.timings.totals(), self.timings.grown_mib, self.timings.milliseconds.get(self.runtime.value, {}),
        )  # fmt: skip

    def config_text(self) -> str:
        """The graph's config.pbtxt naming the runtime (parameter `runtime`, which the backend opens) and a summary
        of the timings (`runtime_timings`, which GET /models shows); its comment header kept."""
        header, config = self.folder.read_config()
        self.runtime_record().write_into(config.parameters)
        return "\n".join(header) + "\n\n" + text_format.MessageToString(config)


def write_into_configs(choices: Mapping[str, Choice]) -> None:
    """Record each choice in its graph's config in the repository itself: for a repository that will be served
    without timing (a remote one). A start never does this: it serves its choice from a folder of its own
    (runtimes/served_repository.py), so that no start changes what another service serving the repository runs."""
    for choice in choices.values():
        choice.folder.config_path.write_text(choice.config_text())


def instance_threads(config: model_config_pb2.ModelConfig) -> int:
    """The threads one instance runs a batch on when all of the model's are busy: what throughput depends on."""
    fixed = int(config.parameters["intra_op_threads"].string_value)
    return fixed or max(1, len(os.sched_getaffinity(0)) // sum(group.count for group in config.instance_group))


def graph_folders(repository: Path, models: Collection[str] | None = None) -> list[ModelFolder]:
    """Every timed graph in the repository (of the catalogued `models`; None: of every model) with a version."""
    folders = [ModelFolder.of(path) for path in sorted(repository.iterdir()) if path.is_dir()]
    return [folder for folder in folders if folder is not None and (models is None or folder.model in models)]


def choose_runtimes(
    repository: Path,
    forced: Mapping[str, Runtime],
    models: Collection[str] | None = None,
    report: Callable[[str], None] = lambda line: None,
) -> dict[str, Choice]:
    """The runtime each timed graph of `models` (None: every model) in `repository` runs on this machine, timed where
    the record beside its config (runtime.json) does not hold for this machine, the new timings recorded there.
    `forced` (catalog name -> runtime) overrides the measurement for each of the model's graphs that has the runtime
    (the incremental decoder has no fused-attention file: its attention is its own); a runtime none of them has is a
    RuntimeChoiceError. Returns the choice for each Triton model; no config is written."""
    timed = []
    for folder in graph_folders(repository, models):
        _, config = folder.read_config()
        version_dir = folder.newest_version()
        threads = instance_threads(config)
        timings = folder.recorded()
        runtimes = {runtime.value for runtime in timeable(version_dir, folder.parts)[0]}
        now = (cpu_model(), threads, int(version_dir.name), runtimes, METHOD)
        if timings is None or timings.measured_for() != now:
            report(f"{folder.path.name}: timing its runtimes on {now[0]}, {threads} thread(s)")
            timings = measure(folder, config, version_dir, threads)
            folder.record(timings)
        timed.append((folder, timings))
    for model, runtime in forced.items():
        graphs = [(folder.path.name, timings) for folder, timings in timed if folder.model == model]
        if graphs and not any(timings.can_run(runtime) for _, timings in graphs):
            why = "; ".join(f"{name}: {timings.left_out.get(runtime.value, '')}" for name, timings in graphs)
            raise RuntimeChoiceError(f"BIONEMO_RUNTIME: {model} cannot run on {runtime.value} here ({why})")
    choices = {}
    for folder, timings in timed:
        runtime = forced.get(folder.model)
        if runtime is not None and not timings.can_run(runtime):
            report(f"{folder.path.name}: no {runtime.value} ({timings.left_out.get(runtime.value, '')}); the fastest measured")
            runtime = None
        chosen_by = "measurement" if runtime is None else "BIONEMO_RUNTIME"
        runtime = runtime or timings.fastest()
        report(f"{folder.path.name}: {runtime.value} ({chosen_by}; ms over the shapes: {timings.totals()})")
        choices[folder.path.name] = Choice(folder, runtime, timings, chosen_by)
    return choices


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bionemo_serving.runtimes.choice", description=__doc__)
    parser.add_argument("--repository", type=Path, default=Path("model_repository"))
    parser.add_argument(
        "--write-configs", action="store_true", help="write the choice into the repository's configs (for S3)"
    )
    args = parser.parse_args(argv)
    raw = os.environ.get(RUNTIME_VARIABLE, "auto")
    try:
        forced = forced_runtimes(raw, sorted({folder.model for folder in graph_folders(args.repository)}))
    except ValueError as error:
        print(f"error: {RUNTIME_VARIABLE}={raw!r}: expected {FORCED_RUNTIMES_FORM} ({error})", file=sys.stderr)
        return 2
    try:
        choices = choose_runtimes(args.repository, forced, report=print)
    except RuntimeChoiceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.write_configs:
        write_into_configs(choices)
    return 0


if __name__ == "__main__":
    sys.exit(main())
