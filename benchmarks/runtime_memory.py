"""Whether a runtime still needs the attention budget's pieces: resident memory over the service's batch shapes.

    python -m benchmarks.runtime_memory [--model esm2nv] [--graph encoder] [--batches 60] [--runtimes openvino ...]

For each runtime exported for the model's graph (model_repository; the encoder, or another graph of token rows such as
the contacts), and each way of running a batch (in pieces of the
config's attention_budget, as the backend does, or whole), a fresh process runs the same batches (1-16 rows of
log-normal protein lengths up to the model's limit, padded to their length bucket, as Triton merges them) on one
thread and reports tokens/s and its resident memory after the first quarter and at the end. A runtime whose arena
keeps the largest working set it has met grows with the rarer long merged batches unless they run in pieces.
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
from exporter.triton_backend.runtimes import Runtime, open_engine, run_in_pieces
from model_catalog import MODELS, GraphRole
from preprocessing import tokenizer_for
from preprocessing.batching import bucket_width
from serving.startup.runtime_choice import feeds_for

WHOLE = 2**62
"""An attention budget no batch reaches: every batch in one run."""


def batches(model: str, count: int) -> list[dict[str, np.ndarray]]:
    description = MODELS[model]
    most_tokens = tokenizer_for(description).max_model_tokens
    special = most_tokens - description.max_length
    rng, numbers = np.random.default_rng(0), random.Random(0)
    shapes = []
    for _ in range(count):
        rows = numbers.randint(1, 16)
        longest = max(min(len(protein(numbers)), description.max_length) for _ in range(rows))
        shapes.append((rows, bucket_width(longest + special, most_tokens)))
    return [feeds_for(description, rows, tokens, rng) for rows, tokens in shapes]


def graph_folder(model: str, role: GraphRole) -> Path:
    return ROOT / "model_repository" / MODELS[model].triton_name(role)


def measure_one(model: str, role: GraphRole, runtime: Runtime, budget: int, count: int) -> dict[str, float]:
    """In this process: the batches on one thread; tokens/s and resident MiB after a quarter and at the end."""
    (graph,) = [graph for graph in MODELS[model].graphs if graph.role is role]
    engine = open_engine(runtime, graph_folder(model, role) / "1" / runtime.file("model"))
    inputs, output = [tensor.name for tensor in graph.inputs], graph.outputs[0].name
    work = [{name: feeds[name] for name in inputs} for feeds in batches(model, count)]
    resident, tokens, started = [], 0, time.perf_counter()
    for feeds in work:
        run_in_pieces(engine, [output], feeds, budget, lambda: contextlib.nullcontext(1))
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
    parser.add_argument("--one", nargs=2, metavar=("RUNTIME", "BUDGET"), help=argparse.SUPPRESS)  # the child's work
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.model, args.graph, Runtime(args.one[0]), int(args.one[1]), args.batches)))
        return 0
    folder = graph_folder(args.model, args.graph)
    config = text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    budget = int(config.parameters["attention_budget"].string_value)
    print(f"{folder.name}, {args.batches} batches, one thread\n")
    print("| runtime | batches run | tokens/s | resident, first quarter -> end |\n|---|---|---:|---|")
    for runtime in args.runtimes:
        for label, each in ((f"in pieces of {budget:,}", budget), ("whole", WHOLE)):
            child = subprocess.run(
                [sys.executable, "-m", "benchmarks.runtime_memory", "--model", args.model, "--graph", args.graph.value,
                 "--batches", str(args.batches), "--one", runtime.value, str(each)],
                cwd=ROOT, capture_output=True, text=True, timeout=3600,
            )  # fmt: skip
            if child.returncode:
                print(f"| {runtime.value} | {label} | failed: {child.stderr.strip().splitlines()[-1]} | |")
                continue
            result = json.loads(child.stdout)
            print(f"| {runtime.value} | {label} | {result['tokens_per_s']:,.0f} | "
                  f"{result['quarter_mib']:,.0f} -> {result['end_mib']:,.0f} MiB |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
