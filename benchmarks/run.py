"""`make bench`: /embed against five ways of serving the same esm2nv weights, in alternation; the JSON, the report, the
targets.

    python -m benchmarks.run [--seconds 10] [--users 1 4 16 32] [--repeats 5] [--contenders service naive ...]

Every server starts at once, each on a free loopback port (waited for, bounded), and stays up to the end. GET /models
says what the service runs esm2nv on (bionemo_serving.runtimes.choice's pick on this CPU): the headline is that runtime, whatever
another one ran elsewhere. Then, --repeats rounds of the sequential probe: one-sequence requests, each sequence to
every contender in turn (shuffled), every answer held against transformers' with the exporter's own bound
(benchmarks.accuracy), so that lone-request latencies are compared request by request. Then per number of users the
contenders in alternation, A B C A B C ... --repeats times (benchmarks.repeats), each a locust run headless; the
matmul reference (benchmarks.flops: one layer's GEMMs of the model at a request's mean tokens) is sampled before the
first contender and after each one. A figure is the median of its repeats with their range; a ratio of two
contenders is taken repeat by repeat and its median held to its target (benchmarks.run_figures.TARGETS). Then the deep
mutational scan of issue 29 (benchmarks.mutational_scan) with the service started alone. The JSON goes to
benchmarks/results/bench-<cpu>.json with every sample, this CPU's report (docs/benchmarks-<cpu>.md and its .png) is
rendered from it (benchmarks.report), and a missed target exits 1, after both are written.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import requests
import torch

from benchmarks import mutational_scan, processes, record, report
from benchmarks.clients import Embedder
from benchmarks.contenders import CONTENDERS, Contender
from benchmarks.contenders.this_service import SERVICE, SERVICE_GRPC
from benchmarks.flops import EncoderShape, GemmReference, ReferenceSamples
from benchmarks.measure import PROBE_ORDER_SEED, probe, run_point
from benchmarks.processes import Running, Server
from benchmarks.repeats import MIN_REPEATS, alternating
from benchmarks.run_figures import targets
from benchmarks.torch_esm import TorchEmbedder
from benchmarks.workload import MODEL, embed_request, protein

WARMUP_REQUESTS = 3
PROBE_SEED, WARMUP_SEED = 1_000_001, 1_000_002  # apart from the users' seeds 0, 1, 2, ...
TOKENS_SEED, TOKENS_REQUESTS = 1_000_003, 1000
"""The mean tokens of this many /embed requests drawn as the users draw them: the rows of the reference's GEMMs."""
PACKAGES = ("bentoml", "nvidia-pytriton", "tritonclient", "onnxruntime", "openvino", "torch", "transformers", "locust")
STARTED = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:5.0f} s] {message}", flush=True)


def torch_answers(sequences: list[str]) -> np.ndarray:
    """What transformers answers for each sequence alone: every contender's probe answers are held against it."""
    model = TorchEmbedder()
    return np.concatenate([model.embed([sequence]) for sequence in sequences])


def request_tokens() -> int:
    """The mean tokens (residues, <cls> and <eos>) of an /embed request of the workload."""
    rng = random.Random(TOKENS_SEED)
    return round(np.mean([embed_request(rng).context()["tokens"] for _ in range(TOKENS_REQUESTS)]))


def warm_up(clients: dict[str, Embedder]) -> None:
    rng = random.Random(WARMUP_SEED)
    for _ in range(WARMUP_REQUESTS):
        request = embed_request(rng)
        for client in clients.values():
            client.embed(request.sequences)


@contextlib.contextmanager
def servers_up(contenders: list[Contender]) -> Iterator[tuple[dict[Server, Running], dict[str, Embedder]]]:
    """The servers of `contenders` started (each waited for, bounded) and a client of every contender that has one,
    warmed up; on the way out the clients closed and the servers stopped by PID. Yields both."""
    running: dict[Server, Running] = {}
    clients: dict[str, Embedder] = {}
    try:
        for server in dict.fromkeys(c.server for c in contenders):
            log(f"{server.name}: starting")
            running[server] = processes.start(server)
        clients.update((c.name, c.client(c.url(running[c.server]))) for c in contenders if c.client is not None)
        log(f"{', '.join(server.name for server in running)}: ready; warm-up")
        warm_up(clients)
        yield running, clients
    finally:
        for client in clients.values():
            client.close()
        for started in running.values():
            processes.stop(started)


def served_runtime(running: dict[Server, Running]) -> dict[str, Any] | None:
    """What runs esm2nv's encoder in the service, as its GET /models says (runtime, why, precision); None where the
    service is not among the contenders."""
    if SERVICE not in running:
        return None
    answer = requests.get(f"{running[SERVICE].url}/models", timeout=60)
    answer.raise_for_status()
    model = next(model for model in answer.json()["models"] if model["name"] == MODEL)
    return next(runtime for runtime in model["runtimes"] if runtime["triton_model"] == MODEL)


def sweep(
    chosen: list[Contender], running: dict[Server, Running], args: argparse.Namespace, reference: ReferenceSamples
) -> list[dict[str, Any]]:
    """Per number of users, the contenders of that sweep in alternation, --repeats times; the reference sampled
    before the first and after each one. Every point, with its repeat."""
    shape = EncoderShape.from_checkpoint()
    points = []
    reference.take("start")
    for users in sorted({*args.users, *args.generate_users}):
        here = [c for c in chosen if users in (args.users if c.workload == "embed" else args.generate_users)]
        for repeat, contender in alternating(here, args.repeats):
            point = run_point(contender, running[contender.server], users, args.seconds, args.warmup, shape)
            reference.take(f"{contender.name}, {users} users, repeat {repeat}")
            log(
                f"{point.contender:17} {users:3} users, repeat {repeat}: {point.rate(point.sequences):6.2f} seq/s "
                f"p50 {point.percentile(50):8.1f} ms  errors {point.errors}  other CPU {100 * point.other_cpu:3.0f} %  "
                f"matmul reference {reference.samples[-1]['gflops']:.0f} GFLOP/s"
            )
            points.append({"repeat": repeat, "point": dataclasses.asdict(point)})
    return points


SCANNING_SERVICE = dataclasses.replace(
    SERVICE, environment=lambda port: {**SERVICE.environment(port), "BIONEMO_REQUEST_TIMEOUT_S": "3600"}
)
"""The service with room for a 1,000-residue scan: 1,000 model passes take minutes on 2 cores, past the default
deadline (BIONEMO_REQUEST_TIMEOUT_S, 120 s), which would answer a 504."""


def measure_scan(lengths: list[int]) -> mutational_scan.ScanRun:
    """The scans, with the service alone on the machine beside the in-process contenders."""
    log(f"{SERVICE.name}: starting, for the mutational scan of {', '.join(map(str, lengths))} residues")
    running = processes.start(SCANNING_SERVICE)
    try:
        return mutational_scan.measure(lengths, f"http://127.0.0.1:{running.port}")
    finally:
        processes.stop(running)


def contender_fields(contender: Contender, served: dict[str, Any] | None) -> dict[str, Any]:
    """A contender as the record describes it; `precision`: what its answers are held to (the export's where it
    serves it, FP32 for transformers)."""
    serves_export = contender.server in (SERVICE, SERVICE_GRPC)
    return {
        "name": contender.name, "title": contender.title, "user_class": contender.user_class,
        "workload": contender.workload, "serves_export": serves_export,
        "precision": served["precision"] if serves_export and served else "FP32",
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10, help="measured seconds per point (after the warm-up)")
    parser.add_argument("--warmup", type=float, default=2, help="seconds at the start of each point left out")
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4, 16, 32], help="the concurrency sweep")
    parser.add_argument("--generate-users", type=int, nargs="+", default=[1, 16], help="users for /generate")
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS, help="alternations of the contenders (and probes)")
    parser.add_argument("--probe", type=int, default=20, help="one-sequence requests per contender and probe round")
    parser.add_argument(
        "--contenders", nargs="+", choices=[c.name for c in CONTENDERS], default=[c.name for c in CONTENDERS]
    )
    parser.add_argument(
        "--scan-lengths", type=int, nargs="*", default=[100, 300, 1000], help="residues of each protein scanned"
    )
    parser.add_argument("--json", type=Path, help="the raw results (default: benchmarks/results/bench-<cpu>.json)")
    parser.add_argument("--out", type=Path, help="the markdown report (default: docs/benchmarks-<this CPU>.md)")
    args = parser.parse_args(argv)
    arguments = argv if argv is not None else sys.argv[1:]
    measured_at = record.commit()  # the code that runs, whatever is committed meanwhile
    run = {**record.header("run", arguments, measured_at), "machine": record.machine(PACKAGES)}
    run["machine"]["torch_threads"] = torch.get_num_threads()
    slug = record.cpu_slug(run["cpu"])
    destination = args.json or record.RESULTS / f"bench-{slug}.json"
    shape = EncoderShape.from_checkpoint()
    reference = ReferenceSamples(GemmReference(shape, request_tokens()))
    log("the torch reference answers")
    rng = random.Random(PROBE_SEED)
    sequences = [protein(rng) for _ in range(args.probe)]
    answers = torch_answers(sequences)

    chosen = [c for c in CONTENDERS if c.name in args.contenders]
    probes: dict[str, list[dict[str, Any]]] = {}
    with servers_up(chosen) as (running, clients):
        served = served_runtime(running)
        log(f"esm2nv served on {served['runtime'] if served else 'not measured'}")
        order = random.Random(PROBE_ORDER_SEED)
        for round_ in range(args.repeats):
            log(f"sequential probe, round {round_}: {len(sequences)} proteins to each of {', '.join(clients)} in turn")
            for name, result in probe(clients, sequences, answers, order).items():
                probes.setdefault(name, []).append(dataclasses.asdict(result))
        points = sweep(chosen, running, args, reference)
    scan = measure_scan(args.scan_lengths) if args.scan_lengths else None

    run |= {
        "settings": {
            "seconds": args.seconds, "warmup": args.warmup, "users": args.users, "generate_users": args.generate_users,
            "repeats": args.repeats, "probe": args.probe, "scan_lengths": args.scan_lengths,
        },
        "shape": dataclasses.asdict(shape), "served": served,
        "contenders": [contender_fields(c, served) for c in chosen],
        "reference": reference.summary(shape, run["flags"]),
        "points": points, "probes": probes, "scan": dataclasses.asdict(scan) if scan else None,
        "took_s": round(time.monotonic() - STARTED, 1),
    }  # fmt: skip
    run["targets"] = targets(run)
    log(f"wrote {record.write(run, destination)}")
    out = args.out or report.default_report(run["cpu"])
    report.write(out, run, destination)
    log(f"wrote {out} and {out.with_suffix('.png')}")
    return record.exit_status(run["targets"])


if __name__ == "__main__":
    sys.exit(main())
