"""docs/benchmarks-<cpu>.md and its .png from one run of the driver: tables, the issue's targets, a plot. One report
per CPU (benchmarks-amd-epyc.md, benchmarks-intel-xeon.md): a run replaces the report of its own CPU only."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
import torch  # noqa: E402
from google.protobuf import text_format  # noqa: E402
from tritonclient.grpc import model_config_pb2  # noqa: E402

from benchmarks.contenders import Contender  # noqa: E402
from benchmarks.flops import FORMULA, EncoderShape  # noqa: E402
from benchmarks.measure import Point, Probe  # noqa: E402
from benchmarks.mutational_scan import ScanRun, lines as scan_lines  # noqa: E402
from benchmarks.processes import ROOT  # noqa: E402
from benchmarks.worker_cpu import SAMPLE_INTERVAL_S  # noqa: E402
from benchmarks.workload import (  # noqa: E402
    DRUG_SMILES,
    MAX_RESIDUES,
    MODEL,
    SAMPLES_PER_SEED,
    SEQUENCES_PER_REQUEST,
)
from model_catalog import MODELS  # noqa: E402

PACKAGES = ("bentoml", "nvidia-pytriton", "tritonclient", "onnxruntime", "openvino", "torch", "transformers", "locust")
SERVICE, DIRECT, NAIVE, PYTRITON = "service", "direct-triton", "naive", "pytriton"
SERVICE_GRPC, SERVICE_OPENAI = "service-grpc", "service-openai"
SERVICE_GENERATE, NAIVE_GENERATE = "service-generate", "naive-generate"
OTHER_CPU_WARNING = 0.1
FEW_ANSWERED = 10
"""Fewer requests answered in a point's window make its throughput a guess: say so next to a target."""
DIRECT_TARGET, DIRECT_TARGET_USERS = 0.95, (16, 32)
"""The issue's target for this service's seq/s against direct Triton's, and the concurrencies it holds at."""
WORKER_FRONTS = ((SERVICE, "/embed (HTTP)"), (SERVICE_GRPC, "gRPC `embed`"), (SERVICE_OPENAI, "/v1/embeddings"))
"""The service's fronts whose API workers' CPU per request the per-concurrency table shows, when measured."""


@dataclass(frozen=True)
class Run:
    command: str
    facts: dict[str, str]
    matmul_gflops: float
    shape: EncoderShape
    contenders: list[Contender]
    points: list[Point]
    probes: dict[str, Probe]
    scan: ScanRun | None
    """The deep mutational scan (benchmarks.mutational_scan), where it ran."""
    args: argparse.Namespace
    took_s: float


def default_report(cpu_model: str) -> Path:
    """docs/benchmarks-<cpu>.md: the CPU's model name without trademarks and "Processor", e.g. "Intel(R) Xeon(R)
    Processor" -> benchmarks-intel-xeon.md, "AMD EPYC" -> benchmarks-amd-epyc.md."""
    name = re.sub(r"\((r|tm)\)|\b(processor|cpu)\b", " ", cpu_model.lower())
    slug = re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown-cpu"
    return ROOT / "docs" / f"benchmarks-{slug}.md"


def _commit() -> str:
    """The commit measured, and whether the working tree differed from it."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)

    head = git("rev-parse", "--short", "HEAD").stdout.strip()
    if not head:
        return "not recorded (no git)"
    changed = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return f"{head}, with uncommitted changes" if changed else head


def machine_facts() -> dict[str, str]:
    """What the numbers depend on, read before anything starts."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "cpu model": model or platform.processor(),
        "cpu": f"{model or platform.processor()}, {os.cpu_count()} logical CPUs ({psutil.cpu_count(logical=False)} cores)",
        "memory": f"{psutil.virtual_memory().total / 2**30:.0f} GiB",
        "load": "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
        "torch threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "packages": ", ".join(f"{name} {metadata.version(name)}" for name in PACKAGES),
    }


def _served_runtime() -> str:
    """What runs esm2nv in the service, as its config records it (runtimes.choice)."""
    config = text_format.Parse((ROOT / "model_repository" / MODEL / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    if "runtime" not in config.parameters:
        return "onnxruntime"
    timings = json.loads(config.parameters["runtime_timings"].string_value)
    return f"{config.parameters['runtime'].string_value}, chosen by {timings['chosen_by']} on {timings['cpu']}"


def _ms(value: float) -> str:
    return f"{value:.1f}" if value == value else "–"  # NaN: nothing answered


def _latencies(p: Point) -> str:
    return " | ".join(_ms(p.percentile(q)) for q in (50, 95, 99))


def _triton(p: Point) -> str:
    """Average batch; queue, compute and output milliseconds per request in Triton during the point."""
    t = p.triton
    if t is None or not t.executions:
        return "– | – | – | –"
    per_request = " | ".join(f"{ns / t.requests / 1e6:.0f}" for ns in (t.queue_ns, t.compute_ns, t.output_ns))
    return f"{t.inferences / t.executions:.2f} | {per_request}"


def _embed_table(run: Run) -> list[str]:
    lines = [
        "| contender | users | answered | req/s | seq/s | residues/s | p50 ms | p95 ms | p99 ms | errors "
        "| avg Triton batch | Triton queue ms | Triton compute ms | Triton output ms | model GFLOP/s | % of matmul "
        "| other CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in _points(run, "embed"):
        gflops = p.rate(p.model_flops) / 1e9
        lines.append(
            f"| {p.contender} | {p.users} | {p.answered} | {p.rate(p.answered):.2f} | {p.rate(p.sequences):.1f} "
            f"| {p.rate(p.residues):,.0f} | {_latencies(p)} | {p.errors} | {_triton(p)} | {gflops:.1f} "
            f"| {100 * gflops / run.matmul_gflops:.0f} % | {100 * p.other_cpu:.0f} % |"
        )
    return lines


def _generate_table(run: Run) -> list[str]:
    points = _points(run, "generate")
    if not points:
        return ["Not measured in this run."]
    lines = [
        "| contender | users | answered | req/s | molecules/s | p50 ms | p95 ms | p99 ms | errors | other CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        lines.append(
            f"| {p.contender} | {p.users} | {p.answered} | {p.rate(p.answered):.2f} | {p.rate(p.samples):.2f} "
            f"| {_latencies(p)} | {p.errors} | {100 * p.other_cpu:.0f} % |"
        )
    return lines


def _other_work(run: Run) -> str:
    worst = max((p.other_cpu for p in run.points), default=0.0)
    if worst > OTHER_CPU_WARNING:
        return f"**other work took up to {100 * worst:.0f} % of the CPU during this run: compare with care.**"
    return f"it stayed at or below {100 * worst:.0f} % in this run."


def _points(run: Run, workload: str) -> list[Point]:
    names = {c.name for c in run.contenders if c.workload == workload}
    return [p for p in run.points if p.contender in names]


def _users(count: int) -> str:
    return f"{count} user" if count == 1 else f"{count} users"


def _at(run: Run, contender: str, users: int) -> Point | None:
    return next((p for p in run.points if p.contender == contender and p.users == users), None)


def _ratio(run: Run, other: str, users: int) -> tuple[float | None, str]:
    """This service's seq/s over `other`'s at `users`, and what it rests on."""
    if users not in run.args.users:
        return None, f"{_users(users)} not in this run's sweep"
    service, baseline = _at(run, SERVICE, users), _at(run, other, users)
    if not (service and baseline and baseline.sequences):
        return None, ""
    basis = f"{service.answered} and {baseline.answered} requests answered"
    if min(service.answered, baseline.answered) < FEW_ANSWERED:
        basis += " (too few: run longer)"
    return service.rate(service.sequences) / baseline.rate(baseline.sequences), basis


def _worker_cpu(point: Point | None) -> str:
    ms = point.api_worker_cpu_ms() if point else None
    return "–" if ms is None else f"{ms:.2f}"


def _against_direct(run: Run) -> list[str]:
    """Users by users: this service's /embed against direct Triton (seq/s and their ratio), and the CPU its API
    workers spent per request answered, for /embed and for each other front measured."""
    measured = {p.contender for p in run.points}
    fronts = [(name, label) for name, label in WORKER_FRONTS if name in measured]
    lines = ["| users | service seq/s | direct-triton seq/s | service / direct-triton | "
             + " | ".join(f"API-worker CPU ms per {label}" for _, label in fronts) + " |",
             "|---:|---:|---:|---:|" + "---:|" * len(fronts)]  # fmt: skip
    for users in run.args.users:
        service, direct = _at(run, SERVICE, users), _at(run, DIRECT, users)
        if not (service or direct):
            continue
        ratio = _ratio(run, DIRECT, users)[0]
        cells = [
            str(users),
            f"{service.rate(service.sequences):.1f}" if service else "–",
            f"{direct.rate(direct.sequences):.1f}" if direct else "–",
            "–" if ratio is None else f"{ratio:.2f}x",
            *(_worker_cpu(_at(run, name, users)) for name, _ in fronts),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines if len(lines) > 2 else ["Not measured in this run (neither `service` nor `direct-triton`)."]


def _worker_cpu_note(run: Run) -> str:
    """What the API-worker CPU columns count, on which CPU."""
    counted = [p for p in run.points if p.api_workers]
    if not counted:
        return "No API worker's CPU was counted in this run."

    def workers(name: str) -> int:
        return max((p.api_workers for p in counted if p.contender == name), default=0)

    grpc = f", {workers(SERVICE_GRPC)} `grpc_api_server` for gRPC" if workers(SERVICE_GRPC) else ""
    return (
        f"API-worker CPU, on this run's {run.facts['cpu']}: the CPU time, user and system, of every thread of the "
        "service's BentoML API worker processes (the kernel's per-thread run time, `/proc/<pid>/task/<tid>/schedstat`; "
        f"{workers(SERVICE)} `bentoml_cli.worker.http_api_server` processes for /embed and /v1/embeddings{grpc}), "
        f"over each point's measured window (read every {SAMPLE_INTERVAL_S:g} s, interpolated at the window's edges), "
        "divided by the requests answered in it: their request handling, validation, tokenizing, the call to Triton "
        f"and the answer's encoding, for requests of {SEQUENCES_PER_REQUEST[0]}-{SEQUENCES_PER_REQUEST[1]} proteins, "
        "and whatever else they did meanwhile. tritonserver and its python-backend stubs (the model), BentoML's "
        "arbiter, the gRPC metrics server and locust are not counted; direct-triton tokenizes and pools in locust's "
        "client, counted nowhere here. Locust and Triton share the same cores, so this is CPU time under that load, "
        f"not on an idle machine.{_background(run)} –: not measured, nothing answered, or a worker ended or was "
        "restarted during the point."
    )


def _background(run: Run) -> str:
    """What the HTTP API workers spent while direct-triton's requests bypassed them, per second and per /embed."""
    per_second, per_request = [], []
    for users in run.args.users:
        direct, service = _at(run, DIRECT, users), _at(run, SERVICE, users)
        if direct and direct.api_worker_cpu_s is not None:
            per_second.append(1000 * direct.api_worker_cpu_s / direct.seconds)
            if service and service.answered:
                per_request.append(per_second[-1] / service.rate(service.answered))
    if not per_second:
        return ""
    sentence = (
        f" While direct-triton's requests bypassed them, the same HTTP workers spent {_span(per_second)} ms of CPU a "
        "second (their background, part of every figure above"
    )
    if per_request:
        sentence += f": {_span(per_request)} ms per /embed at the service's request rates"
    return sentence + ")."


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"


def _targets(run: Run) -> list[str]:
    """The issue's targets: measured value, what it rests on, target, and whether this run meets it."""
    top = max(run.args.users)
    rows: list[tuple[str, float | None, str, str, Callable[[float], bool] | None]] = []
    compared = [(NAIVE, 3.0, top), (PYTRITON, 1.2, top), *((DIRECT, DIRECT_TARGET, u) for u in DIRECT_TARGET_USERS)]
    for other, target, users in compared:
        ratio, basis = _ratio(run, other, users)
        rows.append((f"this service / {other}, seq/s at {users} users", ratio, basis, f">= {target}x", target.__le__))
    overhead, basis = None, ""
    if SERVICE in run.probes and DIRECT in run.probes:
        pairs = list(zip(run.probes[SERVICE].latencies_ms, run.probes[DIRECT].latencies_ms))
        overhead = float(np.median([service_ms - direct_ms for service_ms, direct_ms in pairs]))
        basis = f"{len(pairs)} pairs"
    rows.append(("front overhead: median of paired one-sequence latencies, service − direct Triton (ms)", overhead,
                 basis, "none (reported)", None))  # fmt: skip
    lone, basis = None, ""
    if SERVICE in run.probes and NAIVE in run.probes:
        service_p50, naive_p50 = (float(np.median(run.probes[name].latencies_ms)) for name in (SERVICE, NAIVE))
        lone, basis = service_p50 / naive_p50, f"p50 {service_p50:.1f} vs {naive_p50:.1f} ms, {len(run.probes[SERVICE].latencies_ms)} each"
    rows.append(("one sequence at a time: this service's p50 / the naive server's", lone, basis, "<= 1.0x", (1.0).__ge__))
    service_points = [p for p in run.points if p.contender == SERVICE]
    share, basis = None, ""
    if service_points:
        best = max(service_points, key=lambda p: p.model_flops)
        share = 100 * best.rate(best.model_flops) / 1e9 / run.matmul_gflops
        basis = f"best of the sweep: {_users(best.users)}"
    rows.append(("this service's model FLOP/s at saturation, % of matmul", share, basis, ">= 50 %", (50.0).__le__))
    ratios = [
        (users, grpc.rate(grpc.sequences) / http.rate(http.sequences))
        for users in run.args.users
        if (grpc := _at(run, SERVICE_GRPC, users)) and (http := _at(run, SERVICE, users)) and http.sequences
    ]
    slowest, basis = None, ""
    if ratios:
        users, slowest = min(ratios, key=lambda pair: pair[1])
        basis = f"lowest of {len(ratios)} concurrencies: {_users(users)}"
        if (http := _at(run, SERVICE, users)) and len(http.window_rates) > 1:
            basis += f"; /embed's own windows there {_spread(http)} apart"
    rows.append(("gRPC front / /embed over HTTP, seq/s", slowest, basis, ">= 1.0x at every concurrency", (1.0).__le__))
    top_generate = max(run.args.generate_users)
    generated, generated_by_hand = _at(run, SERVICE_GENERATE, top_generate), _at(run, NAIVE_GENERATE, top_generate)
    ratio, basis = None, ""
    if generated and generated_by_hand and generated_by_hand.samples:
        ratio = generated.rate(generated.samples) / generated_by_hand.rate(generated_by_hand.samples)
        basis = f"{generated.answered} and {generated_by_hand.answered} requests answered"
    rows.append((f"/generate: this service / transformers' generate per request, molecules/s at {top_generate} users",
                 ratio, basis, ">= 3.0x", (3.0).__le__))  # fmt: skip
    lines = ["| what | measured | from | target | met |", "|---|---:|---|---|---|"]
    for what, value, basis, target, meets in rows:
        shown = "not measured" if value is None else f"{value:.2f}"
        met = "–" if value is None or meets is None else "yes" if meets(value) else "no"
        lines.append(f"| {what} | {shown} | {basis} | {target} | {met} |")
    return lines


def _winners(run: Run) -> list[str]:
    """Per number of users: the most sequences per second, and the lowest median latency."""
    lines = []
    for users in run.args.users:
        answered = [p for p in _points(run, "embed") if p.users == users and p.answered]
        if not answered:
            continue
        fastest = max(answered, key=lambda p: p.rate(p.sequences))
        quickest = min(answered, key=lambda p: p.percentile(50))
        lines.append(
            f"- {_users(users)}: most throughput **{fastest.contender}** "
            f"({fastest.rate(fastest.sequences):.1f} seq/s), lowest p50 **{quickest.contender}** "
            f"({quickest.percentile(50):.0f} ms)"
        )
    return lines


def _spread(point: Point) -> str:
    """How far the fastest of a point's windows is above its slowest (one server, the same requests)."""
    slowest, fastest = min(point.window_rates), max(point.window_rates)
    return f"{100 * (fastest / slowest - 1):.0f} %" if slowest else "–"


def _fronts(run: Run) -> list[str]:
    """Each other front of the service (`service-*` /embed contenders: the OpenAI dialect, gRPC) against /embed,
    users by users: the same requests, the same engine and Triton, so the ratio is the front's."""
    fronts = [c.name for c in run.contenders if c.workload == "embed" and c.name.startswith(f"{SERVICE}-")]
    lines = ["| users | /embed seq/s | /embed's windows apart | "
             + " | ".join(f"{name} seq/s | ratio | p50 ratio" for name in fronts) + " |",
             "|---:|---:|---:|" + "---:|---:|---:|" * len(fronts)]  # fmt: skip
    for users in run.args.users:
        base = _at(run, SERVICE, users)
        if not (base and base.sequences):
            continue
        cells = [str(users), f"{base.rate(base.sequences):.1f}", _spread(base) if len(base.window_rates) > 1 else "–"]
        for name in fronts:
            point = _at(run, name, users)
            if point and point.sequences:
                rate = point.rate(point.sequences)
                ratio = rate / base.rate(base.sequences)
                cells += [f"{rate:.1f}", f"{ratio:.2f}x", f"{point.percentile(50) / base.percentile(50):.2f}"]
            else:
                cells += ["–"] * 3
        lines.append("| " + " | ".join(cells) + " |")
    return lines if fronts else ["No other front was measured in this run."]


def _probe_table(run: Run) -> list[str]:
    lines = ["| contender | p50 ms | min ms | max abs difference to torch |", "|---|---:|---:|---:|"]
    for name, result in run.probes.items():
        p50 = np.percentile(result.latencies_ms, 50)
        lines.append(f"| {name} | {p50:.2f} | {min(result.latencies_ms):.2f} | {result.max_abs_difference:.1e} |")
    return lines


def plot(run: Run, path: Path) -> None:
    """p50 (solid) and p95 (dashed) latency, and sequences/s, against users, one colour per contender."""
    figure, (latency, throughput) = plt.subplots(1, 2, figsize=(13, 5))
    for index, contender in enumerate(c.name for c in run.contenders if c.workload == "embed"):
        points = sorted((p for p in run.points if p.contender == contender), key=lambda p: p.users)
        if not points:
            continue
        users = [p.users for p in points]
        colour = f"C{index}"
        latency.plot(users, [p.percentile(50) for p in points], "o-", color=colour, label=f"{contender} p50")
        latency.plot(
            users, [p.percentile(95) for p in points], "s--", color=colour, alpha=0.6, label=f"{contender} p95"
        )
        throughput.plot(users, [p.rate(p.sequences) for p in points], "o-", color=colour, label=contender)
    for axes in (latency, throughput):
        axes.set_xscale("log", base=2)
        axes.set_xticks(run.args.users, [str(u) for u in run.args.users])
        axes.set_xlabel("concurrent users (closed loop, no think time)")
        axes.grid(True, which="both", alpha=0.3)
    latency.set_yscale("log")
    latency.set_ylabel("latency per request, ms")
    latency.set_title("/embed latency: p50 (solid), p95 (dashed)")
    latency.legend(fontsize=7, ncol=2)
    throughput.set_ylabel("sequences per second")
    throughput.set_title("/embed throughput")
    throughput.legend(fontsize=8)
    figure.suptitle(f"esm2nv, 1-8 UniProt-like proteins per request; {run.facts['cpu']}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _scan_section(run: Run) -> list[str]:
    """The deep mutational scan (issue 29), where it ran."""
    if run.scan is None:
        return []
    return [
        "## Deep mutational scan: /score against transformers and esm-cpp",
        "",
        "Every single substitution of one protein per length scored by masked marginal: N masked passes, 19N scores. "
        "`service`: one POST /score with `scan: true` to the service started alone; `transformers`: "
        "`EsmForMaskedLM` (sdpa) in this process, the reference every matrix is held against; esm-cpp 0.2.1 from "
        "PyPI on the same weights (its INT8 path is held to the ranking of the variants, not to the values). "
        "Reproduce with `python -m benchmarks.mutational_scan --lengths "
        f"{' '.join(str(scan.residues) for scan in run.scan.scans)} --service-url URL`, against a service started "
        "with `BIONEMO_REQUEST_TIMEOUT_S=3600` (a long scan takes minutes on a few cores).",
        "",
        *scan_lines(run.scan),
        "",
    ]


def write(path: Path, run: Run) -> None:
    picture = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    plot(run, picture)
    policy = MODELS[MODEL].batching
    weights_flops = 2 * run.shape.matmul_weights_per_layer * run.shape.layers
    attention_flops = 4 * run.shape.hidden * run.shape.layers
    lines = [
        "# Benchmarks: /embed against four other ways of serving the same esm2nv weights; the mutational scan",
        "",
        f"Written by `make bench` on {run.facts['date']} at {run.facts['commit']}, on {run.facts['cpu model']}; "
        f"a run on the same CPU replaces this file and `{picture.name}`.",
        "",
        f"    {run.command}",
        "",
        f"The whole run took {run.took_s:.0f} s. Longer or other sweeps: "
        '`make bench BENCH_SECONDS=60 BENCH_USERS="1 2 4 8 16 32 64"`.',
        "",
        "## Machine",
        "",
        f"- CPU: {run.facts['cpu']}; memory {run.facts['memory']}; load average at the start "
        f"{run.facts['load']} (1, 5, 15 min)",
        f"- float32 matrix multiply, `torch.matmul` of 2048×2048 with torch's {run.facts['torch threads']} threads: "
        f"**{run.matmul_gflops:.0f} GFLOP/s** (best of 10), the physical limit the model's FLOP/s are compared with",
        f"- Python {run.facts['python']}; {run.facts['packages']}; the service's tritonserver is `.venv/bin/tritonserver` "
        "(`tritonserver_setup`), PyTriton starts its own; CPU only",
        "- Everything runs on this machine: the contender, its Triton if any, and locust (the load generator) share "
        "the same cores. `other CPU` is the share of the machine's CPU time that neither took (other work on the "
        f"machine); {_other_work(run)}",
        "",
        "## Contenders",
        "",
        "| name | what | driven by (locustfile.py) |",
        "|---|---|---|",
        *(f"| {c.name} | {c.title} | `{c.user_class}` |" for c in run.contenders),
        "",
        f"All use `checkpoints/esm2nv` ({run.shape.layers} layers, {run.shape.hidden} wide) and answer the mean of "
        "the final hidden states over the residues. `service` and `direct-triton` run its export in "
        f"`model_repository/esm2nv` (Triton's python backend, on {_served_runtime()}); `direct-triton` calls the very "
        "tritonserver the service started (same models, same config). The others run transformers' `EsmModel` in "
        f"torch eager. Both Triton models batch alike: `max_batch_size` {policy.max_batch_size}, dynamic batching "
        f"with a {policy.max_queue_delay_microseconds / 1000:g} ms queue delay, preferred sizes "
        f"{', '.join(map(str, policy.preferred_batch_sizes))}; `bentoml-batching` merges up to "
        f"{policy.max_batch_size} sequences.",
        "",
        "## Workload",
        "",
        f"- /embed: {SEQUENCES_PER_REQUEST[0]}-{SEQUENCES_PER_REQUEST[1]} random proteins per request, lengths "
        f"log-normal with a median of 270 residues (most 100-500, clipped to 20-{MAX_RESIDUES}), from a fixed seed per user "
        "(user i: seed i), so every contender gets the same requests in the same order.",
        f"- /generate: one of {len(DRUG_SMILES)} drug SMILES (20-80 characters), {SAMPLES_PER_SEED[0]}-"
        f"{SAMPLES_PER_SEED[1]} samples, default decoding (greedy, at most 128 tokens), against transformers' "
        "`generate` on the same megamolbart weights, one request at a time (`naive-generate`).",
        f"- Closed loop: every user sends its next request when the last is answered. Each point runs "
        f"{run.args.warmup:g} s of warm-up, then {run.args.seconds:g} s measured; then every user waits for the "
        "request it has sent (nothing is left in a server's queue for the next point). Throughput counts the "
        "requests answered in the measured window; latencies are those of the requests sent in it, each from its "
        "own timer; errors count the whole point.",
        "",
        "## /embed",
        "",
        *_embed_table(run),
        "",
        "`avg Triton batch`: rows per model execution in Triton over the point (`inference_count` / "
        "`execution_count` deltas of the statistics API); `Triton queue/compute/output ms`: per request, from the same "
        "statistics (`queue`, `compute_infer`, `compute_output`; a request merged into a batch with others is charged "
        "the whole execution). `model GFLOP/s`: the useful FLOPs of the answered "
        f"requests per second, with {FORMULA}. For this checkpoint: {weights_flops / 1e6:.1f} MFLOP per token, plus "
        f"{attention_flops / 1e3:.1f} kFLOP per token for every token of its sequence (attention).",
        "",
        "With many users a request waits for all the others (closed loop: the queue always holds one request per "
        "user), and batching servers answer whole batches at once, so a short window holds few answers at 16-32 "
        "users: read `answered` before a ratio, and run longer (`BENCH_SECONDS`) for steadier numbers.",
        "",
        f"![latency and throughput against concurrency]({picture.name})",
        "",
        *_winners(run),
        "",
        "## /embed: this service against direct Triton, per concurrency",
        "",
        "The same /embed workload to the service and, bypassing its front, to the very tritonserver it started "
        f"(`direct-triton`); the issue's target is >= {DIRECT_TARGET}x at "
        f"{' and '.join(map(str, DIRECT_TARGET_USERS))} users (below). With them, the CPU the service's API workers "
        "spent per request answered, for each of its fronts measured.",
        "",
        *_against_direct(run),
        "",
        _worker_cpu_note(run),
        "",
        "## Fronts over the same engine",
        "",
        "The service's other fronts, sent the same /embed requests in the same run: seq/s and their ratio to /embed "
        "(above 1: faster), p50 latency and its ratio (below 1: quicker). The OpenAI route shares /embed's server; "
        "the gRPC front (its own server, `serve-grpc`) ran beside it, each users' count in windows of half the seconds "
        "in the order /embed, gRPC, gRPC, /embed, so that drift weighs on both alike. `/embed's windows apart`: how "
        "much faster /embed's faster window was than its slower one (the same requests to the same server, the gRPC "
        "windows between them): a front's ratio closer to 1 than that is within what this machine's windows swing by.",
        "",
        *_fronts(run),
        "",
        "## The issue's targets",
        "",
        *_targets(run),
        "",
        "## Sequential one-sequence requests",
        "",
        f"{run.args.probe} single proteins, one request at a time, each sent to every contender in turn with all "
        "their servers running (so all are compared request by request, in the same minutes); answers checked "
        "against transformers on the same weights.",
        "",
        *_probe_table(run),
        "",
        "## /generate",
        "",
        *_generate_table(run),
        "",
        *_scan_section(run),
    ]
    path.write_text("\n".join(lines))
