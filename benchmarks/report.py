"""docs/benchmarks-<cpu>.md and its .png, rendered from one `benchmarks.run` record: every table and figure comes
from the JSON (benchmarks/results/bench-<cpu>.json), none is typed. One report per CPU (benchmarks-amd-epyc.md,
benchmarks-intel-xeon.md): a run replaces the report of its own CPU only.

    python -m benchmarks.report --render benchmarks/results/bench-intel-xeon.json [--out docs/benchmarks-intel-xeon.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import accuracy  # noqa: E402
from benchmarks.flops import FLOP_PER_CYCLE, FORMULA, EncoderShape  # noqa: E402
from benchmarks.measure import Point  # noqa: E402
from benchmarks.mutational_scan import ScanRun, lines as scan_lines  # noqa: E402
from benchmarks.processes import ROOT  # noqa: E402
from benchmarks.record import cpu_slug, met_cell  # noqa: E402
from benchmarks.repeats import Spread  # noqa: E402
from benchmarks.run_figures import DIRECT, DIRECT_USERS, NAIVE, SERVICE, SERVICE_GRPC, Figures  # noqa: E402
from benchmarks.worker_cpu import SAMPLE_INTERVAL_S  # noqa: E402
from benchmarks.workload import DRUG_SMILES, MAX_RESIDUES, MODEL, SAMPLES_PER_SEED, SEQUENCES_PER_REQUEST  # noqa: E402
from bionemo_serving.model_catalog import MODELS  # noqa: E402

SERVICE_OPENAI = "service-openai"
OTHER_CPU_WARNING = 0.1
FEW_ANSWERED = 10
"""Fewer requests answered in a point's window make its throughput a guess: say so next to a ratio."""
WORKER_FRONTS = ((SERVICE, "/embed (HTTP)"), (SERVICE_GRPC, "gRPC `embed`"), (SERVICE_OPENAI, "/v1/embeddings"))
"""The service's fronts whose API workers' CPU per request the per-concurrency table shows, when measured."""


def default_report(cpu_model: str) -> Path:
    """docs/benchmarks-<cpu>.md, e.g. benchmarks-intel-xeon.md."""
    return ROOT / "docs" / f"benchmarks-{cpu_slug(cpu_model)}.md"


def _ms(value: float) -> str:
    return f"{value:.1f}" if value == value else "–"  # NaN: nothing answered


def _latencies(p: Point) -> str:
    return " | ".join(_ms(p.percentile(q)) for q in (50, 95, 99))


def _spread(spread: Spread | None, digits: int = 1, scale: float = 1.0) -> str:
    """`median (low-high)` of a figure over its repeats, times `scale`; – where not measured."""
    if spread is None:
        return "–"
    return Spread(spread.median * scale, spread.low * scale, spread.high * scale, spread.count).shown(digits)


def _triton(p: Point) -> str:
    """Average batch; queue, compute and output milliseconds per request in Triton over the repeats."""
    t = p.triton
    if t is None or not t.executions:
        return "– | – | – | –"
    per_request = " | ".join(f"{ns / t.requests / 1e6:.0f}" for ns in (t.queue_ns, t.compute_ns, t.output_ns))
    return f"{t.inferences / t.executions:.2f} | {per_request}"


def _names(run: dict[str, Any], workload: str) -> list[str]:
    return [c["name"] for c in run["contenders"] if c["workload"] == workload]


def _served(run: dict[str, Any]) -> str:
    served = run["served"]
    if served is None:
        return "not measured (the service was not among the contenders)"
    return (
        f"**{served['runtime']}** ({served['precision']}; chosen by {served['chosen_by']}"
        f"{' on ' + served['cpu'] if served.get('cpu') else ''}, as GET /models said during the run)"
    )


def _headline(run: dict[str, Any], figures: Figures) -> list[str]:
    """The served runtime through the service, users by users: what a user of this service gets on this CPU."""
    lines = [
        f"esm2nv is served on {_served(run)}: this section is that runtime through the service (`service`), "
        f"whichever ran fastest elsewhere. Each figure is the median of {run['settings']['repeats']} repeats with "
        "their range; latencies are percentiles of every request of the repeats.",
        "",
        "| users | seq/s | p50 ms | p99 ms | model GFLOP/s | share of the matmul reference |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for users in run["settings"]["users"]:
        pooled = figures.pooled(SERVICE, users)
        if pooled is None:
            continue
        lines.append(
            f"| {users} | {_spread(figures.rate(SERVICE, users))} | {_ms(pooled.percentile(50))} "
            f"| {_ms(pooled.percentile(99))} | {_spread(figures.rate(SERVICE, users, 'model_flops'), 1, 1e-9)} "
            f"| {_spread(figures.share(SERVICE, users), 0, 100)} % |"
        )
    if len(lines) == 4:
        return lines[:2] + ["Not measured in this run."]
    lone, naive = figures.lone_p50(SERVICE), figures.lone_p50(NAIVE)
    if lone is not None:
        against = f"; transformers alone (`naive`) {_spread(naive)} ms" if naive else ""
        lines += ["", f"A lone request (the sequential probe): p50 {_spread(lone)} ms{against}."]
    return lines


def _reference(run: dict[str, Any]) -> str:
    """The matmul reference and the FMA ceiling, with what each is computed from."""
    reference = run["reference"]
    gemms = ", ".join(f"{g['count']} x {g['m']}x{g['k']} @ {g['k']}x{g['n']}" for g in reference["gemms"])
    samples = Spread.of([sample["gflops"] for sample in reference["samples"]])
    text = (
        f"matmul reference, one layer's matrix products at a request's mean {reference['tokens']} tokens ({gemms}), "
        f"`torch.matmul` with torch's {run['machine']['torch_threads']} threads, sampled {samples.count} times (before "
        f"the first contender and after each): **median {samples.median:.0f} GFLOP/s** (range {samples.low:.0f}-"
        f"{samples.high:.0f}), what every share below is of"
    )
    ceiling = reference["fma_ceiling"]
    if ceiling:
        assumption = "; ".join(f"{flag}: {flop}" for flag, flop in FLOP_PER_CYCLE)
        text += (
            f"; FMA ceiling {ceiling['cores']} cores x {ceiling['flop_per_cycle']} FP32 FLOP a cycle "
            f"({ceiling['flag']}; assumed two FMA units a core, FLOP a cycle {assumption}) x {ceiling['mhz']:g} MHz "
            f"(/proc/cpuinfo `cpu MHz`, median at the samples) = **{ceiling['gflops']:.0f} GFLOP/s**: the reference is "
            f"{100 * samples.median / ceiling['gflops']:.0f} % of it"
        )
    return text


def _embed_table(run: dict[str, Any], figures: Figures) -> list[str]:
    lines = [
        "| contender | users | repeats | answered | req/s | seq/s | residues/s | p50 ms | p95 ms | p99 ms | errors "
        "| avg Triton batch | Triton queue ms | Triton compute ms | Triton output ms | model GFLOP/s | % of reference "
        "| other CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in _names(run, "embed"):
        for users in run["settings"]["users"]:
            p = figures.pooled(name, users)
            if p is None:
                continue
            lines.append(
                f"| {name} | {users} | {len(figures.points[name, users])} | {p.answered} "
                f"| {_spread(figures.rate(name, users, 'answered'), 2)} | {_spread(figures.rate(name, users))} "
                f"| {_spread(figures.rate(name, users, 'residues'), 0)} | {_latencies(p)} | {p.errors} | {_triton(p)} "
                f"| {_spread(figures.rate(name, users, 'model_flops'), 1, 1e-9)} "
                f"| {_spread(figures.share(name, users), 0, 100)} | {100 * p.other_cpu:.0f} % |"
            )
    return lines


def _generate_table(run: dict[str, Any], figures: Figures) -> list[str]:
    names = _names(run, "generate")
    lines = [
        "| contender | users | repeats | answered | req/s | molecules/s | p50 ms | p95 ms | p99 ms | errors "
        "| other CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        for users in run["settings"]["generate_users"]:
            p = figures.pooled(name, users)
            if p is None:
                continue
            lines.append(
                f"| {name} | {users} | {len(figures.points[name, users])} | {p.answered} "
                f"| {_spread(figures.rate(name, users, 'answered'), 2)} "
                f"| {_spread(figures.rate(name, users, 'samples'), 2)} | {_latencies(p)} | {p.errors} "
                f"| {100 * p.other_cpu:.0f} % |"
            )
    return lines if len(lines) > 2 else ["Not measured in this run."]


def _other_work(figures: Figures) -> str:
    worst = max((p.other_cpu for points in figures.points.values() for p in points), default=0.0)
    if worst > OTHER_CPU_WARNING:
        return f"**other work took up to {100 * worst:.0f} % of the CPU during this run: compare with care.**"
    return f"it stayed at or below {100 * worst:.0f} % in this run."


def _worker_cpu(point: Point | None) -> str:
    ms = point.api_worker_cpu_ms() if point else None
    return "–" if ms is None else f"{ms:.2f}"


def _against_direct(run: dict[str, Any], figures: Figures) -> list[str]:
    """Users by users: this service's /embed against direct Triton (seq/s and their ratio, repeat by repeat), and the
    CPU its API workers spent per request answered, for /embed and for each other front measured."""
    fronts = [(name, label) for name, label in WORKER_FRONTS if any(c == name for c, _ in figures.points)]
    lines = ["| users | service seq/s | direct-triton seq/s | service / direct-triton | "
             + " | ".join(f"API-worker CPU ms per {label}" for _, label in fronts) + " |",
             "|---:|---:|---:|---:|" + "---:|" * len(fronts)]  # fmt: skip
    for users in run["settings"]["users"]:
        service, direct = figures.rate(SERVICE, users), figures.rate(DIRECT, users)
        if not (service or direct):
            continue
        cells = [
            str(users), _spread(service), _spread(direct), _spread(figures.ratio(SERVICE, DIRECT, users), 2),
            *(_worker_cpu(figures.pooled(name, users)) for name, _ in fronts),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines if len(lines) > 2 else ["Not measured in this run (neither `service` nor `direct-triton`)."]


def _worker_cpu_note(run: dict[str, Any], figures: Figures) -> str:
    """What the API-worker CPU columns count, on which CPU."""
    counted = [p for points in figures.points.values() for p in points if p.api_workers]
    if not counted:
        return "No API worker's CPU was counted in this run."

    def workers(name: str) -> int:
        return max((p.api_workers for p in counted if p.contender == name), default=0)

    grpc = f", {workers(SERVICE_GRPC)} `grpc_api_server` for gRPC" if workers(SERVICE_GRPC) else ""
    return (
        f"API-worker CPU, on this run's {run['cpu']}: the CPU time, user and system, of every thread of the "
        "service's BentoML API worker processes (the kernel's per-thread run time, `/proc/<pid>/task/<tid>/schedstat`; "
        f"{workers(SERVICE)} `bentoml_cli.worker.http_api_server` processes for /embed and /v1/embeddings{grpc}), "
        f"over each point's measured window (read every {SAMPLE_INTERVAL_S:g} s, interpolated at the window's edges), "
        "divided by the requests answered in it, over the repeats: their request handling, validation, tokenizing, "
        f"the call to Triton and the answer's encoding, for requests of {SEQUENCES_PER_REQUEST[0]}-"
        f"{SEQUENCES_PER_REQUEST[1]} proteins, and whatever else they did meanwhile. tritonserver and its "
        "python-backend stubs (the model), BentoML's arbiter, the gRPC metrics server and locust are not counted; "
        "direct-triton tokenizes and pools in locust's client, counted nowhere here. Locust and Triton share the same "
        "cores, so this is CPU time under that load, not on an idle machine. –: not measured, nothing answered, or a "
        "worker ended or was restarted during a point."
    )


def _fronts(run: dict[str, Any], figures: Figures) -> list[str]:
    """Each other front of the service (`service-*` /embed contenders: the OpenAI dialect, gRPC) against /embed,
    users by users, repeat by repeat: the same requests, the same engine and Triton, so the ratio is the front's."""
    fronts = [name for name in _names(run, "embed") if name.startswith(f"{SERVICE}-")]
    if not fronts:
        return ["No other front was measured in this run."]
    lines = ["| users | /embed seq/s | " + " | ".join(f"{name} seq/s | ratio | p50 ratio" for name in fronts) + " |",
             "|---:|---:|" + "---:|---:|---:|" * len(fronts)]  # fmt: skip
    for users in run["settings"]["users"]:
        base = figures.pooled(SERVICE, users)
        if base is None:
            continue
        cells = [str(users), _spread(figures.rate(SERVICE, users))]
        for name in fronts:
            point = figures.pooled(name, users)
            if point is None:
                cells += ["–"] * 3
                continue
            p50 = point.percentile(50) / base.percentile(50)
            cells += [_spread(figures.rate(name, users)), _spread(figures.ratio(name, SERVICE, users), 2), f"{p50:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _targets(run: dict[str, Any]) -> list[str]:
    """The record's targets, as checked when it was written (benchmarks.run_figures.TARGETS)."""
    lines = ["| target | measured | wanted | |", "|---|---:|---|---|"]
    for name, target in run["targets"].items():
        value = "not measured" if target["value"] is None else f"{target['value']:g}"
        lines.append(f"| {name} | {value} | {target['target']} | {met_cell(target)} |")
    return lines


def _probe_table(run: dict[str, Any], figures: Figures) -> list[str]:
    lines = [
        "| contender | p50 ms | min ms | max abs difference | worst cosine | bound | within |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for name, rounds in figures.probes.items():
        precision = figures.precisions[name]
        fastest = min(latency for probe in rounds for latency in probe.latencies_ms)
        difference = max(probe.max_abs_difference for probe in rounds)
        cosine = min(probe.worst_cosine for probe in rounds)
        lines.append(
            f"| {name} | {_spread(figures.lone_p50(name), 2)} | {fastest:.2f} | {difference:.1e} | {cosine:.6f} "
            f"| {accuracy.bound(precision)} | {'yes' if figures.answers_within(name) else '**no**'} |"
        )
    return lines


def plot(run: dict[str, Any], figures: Figures, path: Path) -> None:
    """p50 (solid) and p95 (dashed) latency, and the median sequences/s with its range, against users, one colour per
    contender; the served one drawn thicker."""
    figure, (latency, throughput) = plt.subplots(1, 2, figsize=(13, 5))
    users_axis = run["settings"]["users"]
    for index, name in enumerate(_names(run, "embed")):
        counts = [users for users in users_axis if (name, users) in figures.points]
        if not counts:
            continue
        pooled = [figures.pooled(name, users) for users in counts]
        rates = [figures.rate(name, users) for users in counts]
        colour, width = f"C{index}", 3 if name == SERVICE else 1.5
        latency.plot(counts, [p.percentile(50) for p in pooled], "o-", color=colour, lw=width, label=f"{name} p50")
        latency.plot(counts, [p.percentile(95) for p in pooled], "s--", color=colour, alpha=0.6, label=f"{name} p95")
        medians = np.array([r.median for r in rates])
        errors = [medians - [r.low for r in rates], [r.high for r in rates] - medians]
        throughput.errorbar(counts, medians, yerr=errors, fmt="o-", color=colour, lw=width, capsize=3, label=name)
    for axes in (latency, throughput):
        axes.set_xscale("log", base=2)
        axes.set_xticks(users_axis, [str(u) for u in users_axis])
        axes.set_xlabel("concurrent users (closed loop, no think time)")
        axes.grid(True, which="both", alpha=0.3)
    latency.set_yscale("log")
    latency.set_ylabel("latency per request, ms")
    latency.set_title("/embed latency: p50 (solid), p95 (dashed)")
    latency.legend(fontsize=7, ncol=2)
    throughput.set_ylabel("sequences per second (median, range of the repeats)")
    throughput.set_title("/embed throughput")
    throughput.legend(fontsize=8)
    served = run["served"]["runtime"] if run["served"] else "not measured"
    figure.suptitle(f"esm2nv (served on {served}), 1-8 UniProt-like proteins per request; {run['cpu']}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _scan_section(run: dict[str, Any]) -> list[str]:
    """The deep mutational scan (issue 29), where it ran."""
    if run["scan"] is None:
        return []
    scan = ScanRun.from_json(run["scan"])
    return [
        "## Deep mutational scan: /score against transformers and esm-cpp",
        "",
        "Every single substitution of one protein per length scored by masked marginal: N masked passes, 19N scores. "
        "`service`: one POST /score with `scan: true` to the service started alone; `transformers`: "
        "`EsmForMaskedLM` (sdpa) in this process, the reference every matrix is held against; esm-cpp 0.2.1 from "
        "PyPI on the same weights (its INT8 path is held to the ranking of the variants, not to the values). Its "
        "speed-ups are issue 29's, printed, not among this run's targets. "
        "Reproduce with `python -m benchmarks.mutational_scan --lengths "
        f"{' '.join(str(length.residues) for length in scan.scans)} --service-url URL`, against a service started "
        "with `BIONEMO_REQUEST_TIMEOUT_S=3600` (a long scan takes minutes on a few cores).",
        "",
        *scan_lines(scan),
        "",
    ]


KEPT_SECTION = "## Other measurements on this CPU"
"""Where the report's own part ends: from this heading on, a report keeps what it held (the other benchmarks' tables on
this CPU, each rendered from its own JSON, e.g. the overload step's between its markers)."""


def write(path: Path, run: dict[str, Any], source: Path) -> None:
    """The report of `run` (a benchmarks.run record, read from or written to `source`) at `path`, its plot beside
    it; the page's KEPT_SECTION, where it has one, carried over."""
    before = path.read_text() if path.is_file() else ""
    kept = before[before.index(KEPT_SECTION) :] if KEPT_SECTION in before else ""
    figures = Figures(run)
    picture = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    plot(run, figures, picture)
    shape = EncoderShape(**run["shape"])
    policy = MODELS[MODEL].batching
    settings, machine = run["settings"], run["machine"]
    weights_flops = 2 * shape.matmul_weights_per_layer * shape.layers
    attention_flops = 4 * shape.hidden * shape.layers
    shown = source.resolve().relative_to(ROOT) if source.resolve().is_relative_to(ROOT) else source
    lines = [
        "# Benchmarks: /embed against four other ways of serving the same esm2nv weights; the mutational scan",
        "",
        f"Written by `make bench` on {run['date']} at {run['commit']}, on {run['cpu']}; rendered from its record "
        f"(`python -m benchmarks.report --render {shown}`): every figure here is in that JSON. A run on the same "
        f"CPU replaces this file and `{picture.name}`.",
        "",
        f"    {run['command']}",
        "",
        f"The whole run took {run['took_s']:.0f} s. Longer or other sweeps: "
        '`make bench BENCH_SECONDS=60 BENCH_USERS="1 2 4 8 16 32 64"`.',
        "",
        "## The served runtime",
        "",
        *_headline(run, figures),
        "",
        "## Targets",
        "",
        "Each ratio is the median of the repeats' ratios, the two contenders of a repeat measured one after the other; "
        "why each bound: `benchmarks/run_figures.py`, `TARGETS`. A missed target makes `make bench` exit 1.",
        "",
        *_targets(run),
        "",
        "## Machine",
        "",
        f"- CPU: {run['cpu']}, {machine['logical_cpus']} logical CPUs ({machine['physical_cores']} cores), vector "
        f"flags {' '.join(run['flags'])}; memory {machine['memory_gib']:g} GiB; load average at the start "
        f"{' '.join(f'{load:.2f}' for load in machine['load'])} (1, 5, 15 min)",
        f"- {_reference(run)}",
        f"- Python {run['python']}; "
        + ", ".join(f"{name} {version}" for name, version in machine["packages"].items())
        + "; the service's tritonserver is `.venv/bin/tritonserver` (`tritonserver_setup`), PyTriton starts its own; "
        "CPU only",
        "- Everything runs on this machine: the contender, its Triton if any, and locust (the load generator) share "
        "the same cores. `other CPU` is the share of the machine's CPU time that neither took (other work on the "
        f"machine); {_other_work(figures)}",
        "",
        "## Contenders",
        "",
        "| name | what | driven by (locustfile.py) | answers held to |",
        "|---|---|---|---|",
        *(
            f"| {c['name']} | {c['title']} | `{c['user_class']}` | {accuracy.bound(c['precision'])} |"
            for c in run["contenders"]
        ),
        "",
        f"All use `checkpoints/esm2nv` ({shape.layers} layers, {shape.hidden} wide) and answer the mean of the final "
        "hidden states over the residues. `service` and `direct-triton` run its export in `model_repository/esm2nv` "
        f"(Triton's python backend, on {_served(run)}); `direct-triton` calls the very tritonserver the service "
        "started (same models, same config). The others run transformers' `EsmModel` in torch eager. Both Triton "
        f"models batch alike: `max_batch_size` {policy.max_batch_size}, dynamic batching with a "
        f"{policy.max_queue_delay_microseconds / 1000:g} ms queue delay, preferred sizes "
        f"{', '.join(map(str, policy.preferred_batch_sizes))}; `bentoml-batching` merges up to "
        f"{policy.max_batch_size} sequences.",
        "",
        "## Workload",
        "",
        f"- /embed: {SEQUENCES_PER_REQUEST[0]}-{SEQUENCES_PER_REQUEST[1]} random proteins per request, lengths "
        f"log-normal with a median of 270 residues (most 100-500, clipped to 20-{MAX_RESIDUES}), from a fixed seed "
        "per user (user i: seed i), so every contender gets the same requests in the same order.",
        f"- /generate: one of {len(DRUG_SMILES)} drug SMILES (20-80 characters), {SAMPLES_PER_SEED[0]}-"
        f"{SAMPLES_PER_SEED[1]} samples, default decoding (greedy, at most 128 tokens), against transformers' "
        "`generate` on the same megamolbart weights, one request at a time (`naive-generate`).",
        f"- Closed loop: every user sends its next request when the last is answered. Every server is up for the "
        f"whole run; per number of users the contenders run in alternation, A B C A B C ..., {settings['repeats']} "
        f"times. Each point runs {settings['warmup']:g} s of warm-up, then {settings['seconds']:g} s measured; then "
        "every user waits for the request it has sent (nothing is left in a server's queue for the next point). "
        "Throughput counts the requests answered in the measured window; latencies are those of the requests sent "
        "in it, each from its own timer; errors count the whole point.",
        "",
        "## /embed",
        "",
        *_embed_table(run, figures),
        "",
        "Rates: the median of the repeats, their range in brackets; `answered`, percentiles, errors and Triton's "
        "columns over every repeat together. `avg Triton batch`: rows per model execution in Triton (`inference_count` "
        "/ `execution_count` deltas of the statistics API); `Triton queue/compute/output ms`: per request, from the "
        "same statistics (`queue`, `compute_infer`, `compute_output`; a request merged into a batch with others is "
        "charged the whole execution). `model GFLOP/s`: the useful FLOPs of the answered requests per second, with "
        f"{FORMULA}. For this checkpoint: {weights_flops / 1e6:.1f} MFLOP per token, plus "
        f"{attention_flops / 1e3:.1f} kFLOP per token for every token of its sequence (attention). `% of reference`: "
        "of the run's median matmul reference (Machine, above).",
        "",
        "With many users a request waits for all the others (closed loop: the queue always holds one request per "
        "user), and batching servers answer whole batches at once, so a short window holds few answers at 16-32 "
        f"users (fewer than {FEW_ANSWERED} make a rate a guess): read `answered` before a ratio, and run longer "
        "(`BENCH_SECONDS`) for steadier numbers.",
        "",
        f"![latency and throughput against concurrency]({picture.name})",
        "",
        "## /embed: this service against direct Triton, per concurrency",
        "",
        "The same /embed workload to the service and, bypassing its front, to the very tritonserver it started "
        f"(`direct-triton`); the target is >= 0.95x at {' and '.join(map(str, DIRECT_USERS))} users. With them, the "
        "CPU the service's API workers spent per request answered, for each of its fronts measured.",
        "",
        *_against_direct(run, figures),
        "",
        _worker_cpu_note(run, figures),
        "",
        "## Fronts over the same engine",
        "",
        "The service's other fronts, sent the same /embed requests in the same run, in alternation with /embed: seq/s "
        "and their ratio to /embed repeat by repeat (above 1: faster), and the ratio of the p50 latencies over every "
        "repeat (below 1: quicker). The OpenAI route shares /embed's server; the gRPC front is a server of its own "
        "(`serve-grpc`).",
        "",
        *_fronts(run, figures),
        "",
        "## Sequential one-sequence requests",
        "",
        f"{settings['probe']} single proteins, one request at a time, each sent to every contender in turn (shuffled) "
        f"with all their servers running, in {settings['repeats']} rounds: p50 is the median of the rounds' p50s with "
        "their range; every answer of every round is held against transformers' on the same weights, with the "
        "exporter's own bound for what the contender runs.",
        "",
        *_probe_table(run, figures),
        "",
        "## /generate",
        "",
        *_generate_table(run, figures),
        "",
        *_scan_section(run),
    ]
    path.write_text("\n".join(lines) + ("\n\n" + kept if kept else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--render", type=Path, required=True, help="a benchmarks.run record")
    parser.add_argument("--out", type=Path, help="the markdown report (default: docs/benchmarks-<its CPU>.md)")
    args = parser.parse_args(argv)
    run = json.loads(args.render.read_text())
    out = args.out or default_report(run["cpu"])
    write(out, run, args.render)
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
