"""The exporter's parity gate, carried to a GPU host: each ONNX graph on onnxruntime's CUDA provider against torch.

`--target gpu` exports need onnxruntime-gpu where the checkpoint, torch and the exporter are; a GPU host may have
none of them. So, where the export ran, `write` saves the gate's own batches (padded, mixed lengths:
`bionemo_serving.exporter.graph_inputs.verification_inputs`) and torch's outputs for them, one file per ONNX graph; on the GPU host,
`check` runs each graph of the repository on CUDAExecutionProvider as the python backend opens it
(`bionemo_serving/runtimes/engines.py`, with its PROVIDER_OPTIONS), with onnxruntime's default CUDA options and on
the CPU provider, holds the first to the gate's FP32 tolerance, and times the largest batch on the CUDA and CPU ones.

    .venv/bin/python -m operations.tools.gpu_gate write --models megamolbart esm2nv --out gate-cases
    python -m operations.tools.gpu_gate check --cases gate-cases --repository model_repository     # on the GPU host
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bionemo_serving.runtimes.engines import PROVIDER_OPTIONS, OnnxRuntimeEngine, Runtime

FP32_TOLERANCE = 1e-4
"""bionemo_serving.exporter.verify.TOLERANCES[FP32] (tests/e2e/test_gpu_gate.py holds them equal); verify imports torch, which the
GPU host need not have."""
VERSION = "1"

Batch = tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]
"""One batch of the gate: its feeds, and per output torch's answer and where it must agree."""
Run = Callable[[list[str], dict[str, np.ndarray]], list[np.ndarray]]
"""onnxruntime's `session.run(output names, feeds)`."""


def write(models: list[str], checkpoints: Path, repository: Path, out: Path) -> None:
    """The gate's batches and torch's outputs for every ONNX graph of `models`, as `<triton name>.<part>.npz`."""
    import onnxruntime

    from bionemo_serving.exporter.architectures import load_for_export
    from bionemo_serving.exporter.graph_inputs import verification_inputs
    from bionemo_serving.exporter.pipeline import GATE_SEED
    from bionemo_serving.exporter.verify import torch_answers
    from bionemo_serving.model_catalog import MODELS

    out.mkdir(parents=True, exist_ok=True)
    for name in models:
        description = MODELS[name]
        loaded = load_for_export(description, checkpoints / name, attention="eager")  # as the ONNX file was traced
        for graph in description.graphs:
            triton_name = description.triton_name(graph.role)
            for part in graph.onnx_graphs:
                onnx_path = repository / triton_name / VERSION / part.file
                inputs = [tensor.name for tensor in onnxruntime.InferenceSession(str(onnx_path)).get_inputs()]
                outputs = [spec.name for spec in part.outputs]
                module, arrays = loaded.module(graph, part), {}
                for index, batch in enumerate(
                    verification_inputs(description, graph.role, loaded.graphs, GATE_SEED, part.name)
                ):
                    for input_name, array in batch.feeds.items():
                        arrays[f"{index}/feed/{input_name}"] = array
                    for output, reference in zip(outputs, torch_answers(module, inputs, batch, len(outputs))):
                        arrays[f"{index}/torch/{output}"] = reference
                        arrays[f"{index}/compared/{output}"] = batch.compared.get(
                            output, np.ones(reference.shape[:1], dtype=bool)
                        )
                np.savez_compressed(out / f"{triton_name}.{part.name}.npz", **arrays)
                print(f"wrote {out / f'{triton_name}.{part.name}.npz'} ({onnx_path})")


def _batches(case: Path) -> list[Batch]:
    arrays = np.load(case)
    batches: dict[str, Batch] = {}
    for key in arrays.files:
        index, kind, name = key.split("/")
        feeds, expected = batches.setdefault(index, ({}, {}))
        if kind == "feed":
            feeds[name] = arrays[key]
        elif kind == "torch":
            expected[name] = (arrays[key], arrays[f"{index}/compared/{name}"])
    return [batches[index] for index in sorted(batches, key=int)]


def _worst(run: Run, batches: list[Batch]) -> float:
    worst = 0.0
    for feeds, expected in batches:
        answers = run(list(expected), feeds)
        for answer, (reference, where) in zip(answers, expected.values()):
            worst = max(worst, float(np.abs(answer[where] - reference[where]).max()))
    return worst


def _median_ms(run: Run, feeds: dict[str, np.ndarray], outputs: list[str], repeats: int = 20) -> float:
    run(outputs, feeds)  # warm-up: kernels chosen, memory taken
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run(outputs, feeds)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def check(cases: Path, repository: Path, provider: str) -> int:
    """0 where every graph served on `provider` is within the gate's tolerance of torch."""
    import onnxruntime

    if provider != "CPUExecutionProvider":
        onnxruntime.preload_dlls()  # CUDA and cuDNN from pip's nvidia packages where no system CUDA is installed
    print(f"onnxruntime {onnxruntime.__version__}; providers: {', '.join(onnxruntime.get_available_providers())}")
    print(
        f"\n| graph | served on {provider} {PROVIDER_OPTIONS.get(provider, {})} | {provider} with onnxruntime's "
        f"defaults | CPU provider | largest batch: {provider} ms | CPU ms |\n|---|---:|---:|---:|---:|---:|"
    )
    failed = []
    for case in sorted(cases.glob("*.npz")):
        triton_name, part = case.stem.split(".")
        path = repository / triton_name / VERSION / Runtime.ONNXRUNTIME.file(part)
        served = OnnxRuntimeEngine(path, provider)  # what open_engine gives the backend for this file
        session = served.session(1)
        if session.get_providers()[0] != provider:
            raise SystemExit(f"{path}: onnxruntime placed it on {session.get_providers()}, not {provider}")
        defaults = onnxruntime.InferenceSession(str(path), providers=[provider])
        cpu = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        batches = _batches(case)
        served_run = lambda outputs, feeds: served.run(outputs, feeds, 1)  # noqa: E731
        differences = [_worst(run, batches) for run in (served_run, defaults.run, cpu.run)]
        largest_feeds, largest_expected = max(batches, key=lambda batch: sum(a.size for a in batch[0].values()))
        timings = [_median_ms(run, largest_feeds, list(largest_expected)) for run in (served_run, cpu.run)]
        print(
            f"| {triton_name} {part} | {differences[0]:.2e} | {differences[1]:.2e} | {differences[2]:.2e} "
            f"| {timings[0]:.2f} | {timings[1]:.2f} |"
        )
        if not differences[0] <= FP32_TOLERANCE:
            failed.append(f"{triton_name} {part}")
    verdict = "FAILED " + ", ".join(failed) if failed else "all pass"
    print(f"\nserved on {provider}, held to torch within {FP32_TOLERANCE:g}: {verdict}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    writing = commands.add_parser("write", help="the gate's batches and torch's outputs (where the export ran)")
    writing.add_argument("--models", nargs="+", default=["esm2nv", "megamolbart"])
    writing.add_argument("--checkpoints", type=Path, default=Path("checkpoints"))
    writing.add_argument("--repository", type=Path, default=Path("model_repository"))
    writing.add_argument("--out", type=Path, required=True)
    checking = commands.add_parser("check", help="run them on CUDAExecutionProvider (on the GPU host)")
    checking.add_argument("--cases", type=Path, required=True)
    checking.add_argument("--repository", type=Path, default=Path("model_repository"))
    checking.add_argument("--provider", default="CUDAExecutionProvider", help="CPUExecutionProvider: a dry run here")
    args = parser.parse_args(argv)
    if args.command == "write":
        write(args.models, args.checkpoints, args.repository, args.out)
        return 0
    return check(args.cases, args.repository, args.provider)


if __name__ == "__main__":
    sys.exit(main())
