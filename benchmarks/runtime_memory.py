"""Whether a runtime still needs the attention budget's pieces: resident memory over the service's batch shapes.

    python -m benchmarks.runtime_memory [--model esm2nv] [--graph encoder] [--batches 60] [--runtimes openvino ...]
        [--arenas kept shrunk off]

For each runtime exported for the model's graph (model_repository; the encoder, or another graph of token rows such as
the contacts or the layers, which is asked for every layer), each of onnxruntime's `--arenas` (runtimes.Arena), and
each way of running a batch (in pieces of the config's attention_budget, as the backend does, or whole), a fresh
process runs the same batches (1-16 rows of log-normal protein lengths up to the model's limit, padded to their
length bucket, as Triton merges them) on one thread, hands freed memory back after each as the backend does
(FreedMemory), and reports tokens/s and its resident memory after the first quarter and at the end. A runtime whose
arena keeps the largest working set it has met grows with the rarer long merged batches unless they run in pieces.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from benchmarks.processes import ROOT
from benchmarks.workload import protein
from model_catalog import MODELS, GraphRole
from preprocessing import tokenizer_for
from preprocessing.batching import bucket_width
from runtimes.choice import feeds_for
from runtimes.engines import Arena, FreedMemory, Runtime, open_engine, run_in_pieces

WHOLE = 2**62
"""An attention budget no batch reaches: every batch in one run."""


def batches(model: str, count: int, layers: int = 0) -> list[dict[str, np.ndarray]]:
    """The batches' inputs; with `layers` (the layers graph's hidden_layers), asking for every layer."""
    description = MODELS[model]
    most_tokens = tokenizer_for(description).max_model_tokens
    special = most_tokens - description.max_length
    rng, numbers = np.random.default_rng(0), random.Random(0)
    shapes = []
    for _ in range(count):
        rows = numbers.randint(1, 16)
        longest = max(min(len(protein(numbers)), description.max_length) for _ in range(rows))
        shapes.append((rows, bucket_width(longest + special, most_tokens)))
    return [
        feeds_for(description, rows, tokens, rng) | {"layers": np.tile(np.arange(layers), (rows, 1))}
        for rows, tokens in shapes
    ]


def graph_folder(model: str, role: GraphRole) -> Path:
    return ROOT / "model_repository" / MODELS[model].triton_name(role)


def measure_one(
    model: str, role: GraphRole, runtime: Runtime, arena: Arena, budget: int, count: int
) -> dict[str, float]:
    """In this process: the batches on one thread; tokens/s and resident MiB after a quarter and at the end."""
    (graph,) = [graph for graph in MODELS[model].graphs if graph.role is role]
    folder = graph_folder(model, role)
    engine = open_engine(runtime, folder / "1" / runtime.file("model"), arena=arena)
    freed_memory = FreedMemory(interval_s=0)
    config = text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    layers = int(config.parameters["hidden_layers"].string_value or 0)
    inputs, output = [tensor.name for tensor in graph.inputs], graph.outputs[0].name
    work = [{name: feeds[name] for name in inputs} for feeds in batches(model, count, layers)]
    resident, tokens, started = [], 0, time.perf_counter()
    for feeds in work:
        run_in_pieces(engine, [output], feeds, budget, lambda: contextlib.nullcontext(1))
        freed_memory.release()
        tokens += feeds["input_ids"].size
        resident.append(psutil.Process().memory_info().rss / 2**20)
    return {
        "tokens_per_s": tokens / (time.perf_counter() - started),
        "quarter_mib": resident[len(work) // 4],
        "end_mib": resident[-1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="esm2nv", choices=sorted(MODELS))
    parser.add_argument("--graph", type=GraphRole, default=GraphRole.ENCODER, help="encoder, contacts, ...")
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--runtimes", nargs="+", type=Runtime, default=list(Runtime))
    parser.add_argument("--arenas", nargs="+", type=Arena, default=[Arena.KEPT], help="onnxruntime's (kept shrunk off)")
    parser.add_argument("--one", nargs=3, metavar=("RUNTIME", "ARENA", "BUDGET"), help=argparse.SUPPRESS)  # a child's
    args = parser.parse_args(argv)
    if args.one:
        runtime, arena, budget = Runtime(args.one[0]), Arena(args.one[1]), int(args.one[2])
        print(json.dumps(measure_one(args.model, args.graph, runtime, arena, budget, args.batches)))
        return 0
    folder = graph_folder(args.model, args.graph)
    config = text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    budget = int(config.parameters["attention_budget"].string_value)
    print(f"{folder.name}, {args.batches} batches, one thread\n")
    print("| runtime | arena | batches run | tokens/s | resident, first quarter -> end |\n|---|---|---|---:|---|")
    onnxruntimes = (Runtime.ONNXRUNTIME, Runtime.ONNXRUNTIME_FUSED)
    for runtime in args.runtimes:
        for arena in args.arenas if runtime in onnxruntimes else ["its own"]:
            for label, each in ((f"in pieces of {budget:,}", budget), ("whole", WHOLE)):
                child = subprocess.run(
                    [sys.executable, "-m", "benchmarks.runtime_memory", "--model", args.model, "--graph",
                     args.graph.value, "--batches", str(args.batches), "--one", runtime.value,
                     Arena(arena).value if runtime in onnxruntimes else Arena.KEPT.value, str(each)],
                    cwd=ROOT, capture_output=True, text=True, timeout=3600,
                )  # fmt: skip
                what = f"| {runtime.value} | {getattr(arena, 'value', arena)} | {label} |"
                if child.returncode:
                    print(f"{what} failed: {child.stderr.strip().splitlines()[-1]} | |")
                    continue
                result = json.loads(child.stdout)
                print(f"{what} {result['tokens_per_s']:,.0f} | "
                      f"{result['quarter_mib']:,.0f} -> {result['end_mib']:,.0f} MiB |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
