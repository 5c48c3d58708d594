"""One model's encoder under each runtime, side by side in this process: a markdown table of latencies.

No server, no client: each runtime the exporter wrote into the repository runs through the engine the python
backend opens (runtimes/engines.py), on the same feeds right after the others, shape by shape,
so that the numbers differ by the runtime alone (and by whatever else the machine does meanwhile: each row says
how many cores other processes kept busy, and a busy row is measured again). Best of `--repeats` after a
warm-up; torch eager (sdpa) on the checkpoint is the reference every output is checked against.

    python -m benchmarks.runtime_inprocess --model esm2nv --threads 1 2
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import psutil
import torch
import transformers

from exporter.architectures import load_for_export
from exporter.graph_inputs import encoder_inputs
from model_catalog import MODELS, GraphRole, ModelDescription
from preprocessing import tokenizer_for
from runtimes.engines import Runtime, open_engine

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ("1x102", "1x272", "8x128", "8x272", "8x512", "2x1024")
"""batch x tokens per row (special tokens included); a model skips those over its longest input."""
PACKAGES = ("onnxruntime", "openvino", "torch", "transformers")


@dataclass(frozen=True)
class Subject:
    """One model's encoder as every runtime starts from it: the torch module and the exported version's folder."""

    description: ModelDescription
    module: torch.nn.Module
    version_dir: Path


@dataclass(frozen=True)
class Quiet:
    """A row measured while other processes kept more than `other_cores` busy is measured again after
    `pause_s`, up to `attempts` times in all; the row measured with the least other work is kept."""

    other_cores: float
    attempts: int
    pause_s: float


Run = Callable[[dict[str, np.ndarray]], np.ndarray]
"""Runs one batch of the encoder's feeds; returns its hidden states."""
Prepare = Callable[[Subject, int], Run]
"""Prepares a runtime for `Subject` at a number of threads."""


def served(runtime: Runtime) -> Prepare:
    """The runtime's file in the repository, run by the backend's engine."""

    def prepare(subject: Subject, threads: int) -> Run:
        engine = open_engine(runtime, subject.version_dir / runtime.file("model"))
        return lambda feeds: engine.run(["hidden_states"], feeds, threads)[0]

    return prepare


def torch_eager(subject: Subject, threads: int) -> Run:
    """The module itself (attention through sdpa); torch's thread count is set at every call, being global."""

    def run(feeds: dict[str, np.ndarray]) -> np.ndarray:
        torch.set_num_threads(threads)
        with torch.inference_mode():
            hidden_states, _ = subject.module(**{name: torch.from_numpy(array) for name, array in feeds.items()})
        return hidden_states.numpy()

    return run


REFERENCE = "torch eager (sdpa)"
RUNTIMES: dict[str, Prepare] = {**{runtime.value: served(runtime) for runtime in Runtime}, REFERENCE: torch_eager}
"""The first is the baseline the others are compared with; every one is checked against REFERENCE."""


def load_subject(name: str, checkpoints: Path, repository: Path) -> Subject:
    """The checkpoint under sdpa attention, and the newest exported version of its encoder."""
    description = MODELS[name]
    loaded = load_for_export(description, checkpoints / name, attention="sdpa")
    folder = repository / description.triton_name(GraphRole.ENCODER)
    version = max((entry for entry in folder.iterdir() if entry.name.isdigit()), key=lambda entry: int(entry.name))
    return Subject(description, loaded.graphs[GraphRole.ENCODER], version)


def full_rows(description: ModelDescription, batch: int, tokens: int) -> dict[str, np.ndarray]:
    """`batch` rows of random content, each `tokens` long with its special tokens: no padding."""
    tokenizer = tokenizer_for(description)
    specials = len(tokenizer.wrap(tokenizer.content_ids[:0]))
    return encoder_inputs(description, [tokens - specials] * batch, np.random.default_rng(batch * tokens)).feeds


def best_seconds(run: Run, feeds: dict[str, np.ndarray], repeats: int) -> float:
    """The best of `repeats` runs back to back, as a served session runs.

    Not taking turns with the other runtimes: a thread pool keeps spinning a while after a run (onnxruntime's
    by default, as the python backend has it), and at 2 threads on 2 cores that made whichever runtime ran
    next 50-60 % slower.
    """
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        run(feeds)
        timings.append(time.perf_counter() - started)
    return min(timings)


@dataclass(frozen=True)
class Row:
    """Every runtime at one shape: best seconds, the largest |hidden states - REFERENCE's|, and the cores other
    processes kept busy meanwhile (on a machine shared with other work, a row where they took a core measures
    them too)."""

    seconds: dict[str, float]
    difference: float
    other_cores: float


def measure_row(runs: dict[str, Run], feeds: dict[str, np.ndarray], repeats: int) -> Row:
    """Each runtime in turn: its first run (checked against REFERENCE's) as the warm-up, then its timed runs."""
    (machine_before, own_before), started = cpu_seconds(), time.perf_counter()
    outputs, seconds = {}, {}
    for name, run in runs.items():
        outputs[name] = run(feeds)  # also the warm-up: allocations, kernel choices, the last runtime's threads
        seconds[name] = best_seconds(run, feeds, repeats)
    (machine_after, own_after), took = cpu_seconds(), time.perf_counter() - started
    others = max(0.0, (machine_after - machine_before - (own_after - own_before)) / took)  # tick-granular
    difference = max(float(np.abs(output - outputs[REFERENCE]).max()) for output in outputs.values())
    return Row(seconds, difference, others)


def measure(
    subject: Subject, shapes: list[tuple[int, int]], threads: list[int], repeats: int, quiet: Quiet
) -> tuple[list[str], float]:
    """The table's rows, every runtime at every shape; and the largest |hidden states - REFERENCE's| met."""
    names = list(RUNTIMES)
    baseline = names[0]
    header = ["threads", "batch x tokens", *(f"{name} (ms)" for name in names)]
    header += [f"{name}: speed-up over {baseline}" for name in names[1:]] + ["other processes (cores)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    worst = 0.0
    for count in threads:
        runs = {name: prepare(subject, count) for name, prepare in RUNTIMES.items()}
        for batch, tokens in shapes:
            feeds = full_rows(subject.description, batch, tokens)
            row = measure_row(runs, feeds, repeats)
            for _ in range(quiet.attempts - 1):
                if row.other_cores <= quiet.other_cores:
                    break
                time.sleep(quiet.pause_s)
                row = min(row, measure_row(runs, feeds, repeats), key=lambda kept: kept.other_cores)
            worst = max(worst, row.difference)
            cells = [str(count), f"{batch} x {tokens}", *(f"{row.seconds[name] * 1e3:.1f}" for name in names)]
            cells += [f"{row.seconds[baseline] / row.seconds[name]:.2f}x" for name in names[1:]]
            lines.append("| " + " | ".join(cells + [f"{row.other_cores:.2f}"]) + " |")
    return lines, worst


def machine() -> str:
    """What the numbers depend on: the CPU and the packages."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "")
    packages = ", ".join(f"{name} {metadata.version(name)}" for name in PACKAGES)
    return f"{model or platform.processor()}, {os.cpu_count()} logical CPUs; {packages}"


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds the whole machine and this process have spent so far: the difference is other work."""
    machine_times, own = psutil.cpu_times(), psutil.Process().cpu_times()
    busy = machine_times.user + machine_times.nice + machine_times.system + machine_times.irq + machine_times.softirq
    return busy + getattr(machine_times, "steal", 0.0), own.user + own.system


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="esm2nv", choices=sorted(MODELS))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="intra-op threads of every runtime")
    parser.add_argument("--shapes", nargs="+", default=SHAPES, help="batch x tokens, e.g. 8x512")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per point, after one warm-up; the best")
    parser.add_argument("--max-other-cores", type=float, default=0.2, help="measure a row again above this")
    parser.add_argument("--attempts", type=int, default=3, help="most measurements of one row")
    parser.add_argument("--pause", type=float, default=20, help="seconds to wait before measuring a busy row again")
    parser.add_argument("--checkpoints", type=Path, default=ROOT / "checkpoints")
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    args = parser.parse_args(argv)
    transformers.logging.set_verbosity_error()  # its load report lists the checkpoint's unused heads
    longest = tokenizer_for(MODELS[args.model]).max_model_tokens
    shapes = [(int(batch), int(tokens)) for batch, tokens in (shape.split("x") for shape in args.shapes)]
    skipped = [f"{batch}x{tokens}" for batch, tokens in shapes if tokens > longest]
    subject = load_subject(args.model, args.checkpoints, args.repository)
    quiet = Quiet(args.max_other_cores, args.attempts, args.pause)
    runnable = [shape for shape in shapes if shape[1] <= longest]
    rows, worst = measure(subject, runnable, args.threads, args.repeats, quiet)
    print(f"{args.model} encoder, in-process, best of {args.repeats} after a warm-up; {machine()}")
    print(f"largest |hidden states - {REFERENCE}| at any shape: {worst:.1e}")
    if skipped:
        print(f"skipped {', '.join(skipped)}: over the {longest} tokens of {args.model}'s longest input")
    print()
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
