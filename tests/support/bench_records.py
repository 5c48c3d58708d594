"""Benchmark records made by hand, as few fields as each renderer and target check reads: their figures are known, so
the tests can say what the checks and the tables must make of them."""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.measure import Point, Probe

SERVED = {"triton_model": "esm2nv", "runtime": "onnxruntime", "chosen_by": "measurement", "cpu": "a CPU",
          "precision": "FP32", "threads": 1}  # fmt: skip
REFERENCE_GFLOPS = 10.0


def point(contender: str, users: int, sequences: int, seconds: float = 10.0, errors: int = 0) -> Point:
    """A point answering `sequences` in `seconds`, each request one sequence of 300 tokens, 1 GFLOP each."""
    return Point(
        contender=contender, users=users, seconds=seconds, answered=sequences, errors=errors,
        latencies_ms=[100.0, 200.0, 300.0], sequences=sequences, residues=298 * sequences, samples=0,
        model_flops=1e9 * sequences, triton=None, other_cpu=0.0, window_rates=(sequences / seconds,),
    )  # fmt: skip


def probe(p50_ms: float, max_abs_difference: float = 1e-6, worst_cosine: float = 1.0) -> dict[str, Any]:
    return dataclasses.asdict(Probe([p50_ms - 1, p50_ms, p50_ms + 1], max_abs_difference, worst_cosine))


def run_record(
    rates: dict[str, list[int]],
    users: list[int],
    probes: dict[str, list[dict[str, Any]]] | None = None,
    precision: str = "FP32",
) -> dict[str, Any]:
    """A benchmarks.run record: each contender's sequences answered per repeat (10 s points) at every users count,
    all /embed contenders; the service and the gRPC front serve the export at `precision`."""
    repeats = len(next(iter(rates.values())))
    points = [
        {"repeat": repeat, "point": dataclasses.asdict(point(name, count, sequences))}
        for count in users
        for repeat in range(repeats)
        for name, answered in rates.items()
        for sequences in [answered[repeat]]
    ]
    contenders = [
        {"name": name, "title": name, "user_class": "EmbedUser", "workload": "embed",
         "serves_export": name.startswith("service"), "precision": precision if name.startswith("service") else "FP32"}
        for name in rates
    ]  # fmt: skip
    return {
        "benchmark": "run", "cpu": "Intel(R) Xeon(R) Processor", "cores": 2, "flags": ["avx2", "avx512f", "fma"],
        "date": "2026-11-29 04:00:00 UTC", "commit": "abc1234+changes", "python": "3.11.7",
        "command": "python -m benchmarks.run --seconds 10",
        "machine": {"logical_cpus": 2, "physical_cores": 2, "memory_gib": 24.0, "load": [1.0, 1.0, 1.0],
                    "packages": {"torch": "2.13.0"}, "torch_threads": 2},
        "settings": {"seconds": 10.0, "warmup": 2.0, "users": users, "generate_users": [1], "repeats": repeats,
                     "probe": 3, "scan_lengths": []},
        "shape": {"layers": 6, "hidden": 320, "intermediate": 1280},
        "served": {**SERVED, "precision": precision},
        "contenders": contenders,
        "reference": {
            "tokens": 1300, "gemms": [{"count": 4, "m": 1300, "k": 320, "n": 320}],
            "samples": [{"moment": "start", "gflops": REFERENCE_GFLOPS, "mhz": 2100.0}],
            "gflops_median": REFERENCE_GFLOPS, "int8_gops_median": None,
            "fma_ceiling": {"cores": 2, "flop_per_cycle": 64, "flag": "avx512f", "mhz": 2100.0, "gflops": 268.8},
        },
        "points": points, "probes": probes or {}, "scan": None, "took_s": 60.0, "targets": {},
    }  # fmt: skip


def real_sizes_record(seconds: dict[str, list[float]], served: dict[str, str], flags: list[str]) -> dict[str, Any]:
    """A benchmarks.real_sizes record of the short workload alone: each contender's seconds per repeat; `served`: kind
    (FP32, INT8) -> the contender served; checks all within their bounds."""
    from benchmarks.real_sizes import workload_figures

    reference = {"tokens": 2064, "samples": [{"moment": "start", "gflops": 100.0, "int8_gops": 200.0, "mhz": 2100.0}],
                 "gflops_median": 100.0, "int8_gops_median": 200.0, "fma_ceiling": None}  # fmt: skip
    served_names = set(served.values())

    class Found:  # what workload_figures reads of a contender
        def __init__(self, name: str, kind: str) -> None:
            self.name, self.kind, self.served = name, kind, name in served_names

    kinds = {name: kind for kind, name in served.items()}
    found = [Found(name, kinds.get(name, "other")) for name in seconds]
    checks = {
        name: {"figure": "max abs difference", "worst": 1e-6, "calls": len(times), "within": True,
               "served": name in served_names}
        for name, times in seconds.items()
    }  # fmt: skip
    return {
        "benchmark": "real-sizes", "cpu": "Intel(R) Xeon(R) Processor", "cores": 2, "flags": flags, "date": "today",
        "commit": "abc1234", "command": "python -m benchmarks.real_sizes", "size": "8M", "threads": 2, "batch": 16,
        "repeats": len(next(iter(seconds.values()))),
        "served": {kind: {"runtime": name, "chosen_by": "measurement"} for kind, name in served.items()},
        "left_out": {},
        "workloads": {
            "8 x 256": {
                "proteins": 8, "calls": 1, "tokens": 2064, "flops": 100e9, "samples": seconds,
                "reference": reference, "checks": checks,
                "figures": workload_figures(seconds, 100e9, reference, found),
            }
        },
    }  # fmt: skip
