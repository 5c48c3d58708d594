"""`make bench`'s overload step: /embed held past capacity, against its own saturation in the same run.

    python -m benchmarks.overload [--repository model_repository] [--label 8M] [--seconds 20] [--deadline 5]
                                  [--proteins 8] [--json overload-8M.json]

Starts the service serving esm2nv alone from --repository on a free loopback port, and:
1. a lone client's requests one at a time on the idle service: their p50 latency;
2. closed-loop clients (1, 2, 4, 8, 16), each its own X-Client-Id, every request --proteins of 300 residues with
   X-Request-Timeout --deadline: the saturating concurrency S (the fewest clients within 10 % of the most tokens
   answered per second of these, at least LEAST_SATURATING);
3. REPEATS rounds of S, 2S, 4S and 8S such clients, one step each in turn, each client waiting the Retry-After it is
   told (with jitter) before it sends again: the saturation goodput is the S steps', and each overload's ratio to it
   the median of the rounds' ratios (each overload step over the S step of its round);
4. one client flooding with 8S connections, while the lone client sends its requests one at a time: their p50;
5. (--client-file N) `bionemo-client embed` (from .venv-client) on a FASTA of N proteins while 4 other clients, S
   connections each, hold the service at 4x: its file has every record once, in order, none refused.
Throughout, GET /readyz once a second and the PSS of every process of the service (tritonserver, its stubs, the API
side) before, during and after each step; Triton's compute time of esm2nv over each step (its busy share, and seconds
a call). A step ends at its time: the requests still out are dropped by their clients, so that the next step starts
on a drained service. Then the targets, each checked: goodput >= 0.9x saturation at every overload, refusals
answered within 50 ms p99 (in the service, by its `Server-Timing`; the time at the clients, which adds this one
process's queueing of a step's clients, is shown beside it), no 504, answered p99 within the deadline, readiness 200
throughout, memory flat (PSS after the last step within 10 % of that after saturation), the lone client's p50 within
2x of the idle one's. Exit 1 on a miss, after the JSON is written.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import prometheus_client.parser
import psutil

from benchmarks import record
from benchmarks.client_files import run_cli, write_fasta
from benchmarks.processes import Running, Server, start, stop
from benchmarks.repeats import MIN_REPEATS, Spread, alternating, paired_ratios
from benchmarks.served_memory import pss_kib
from benchmarks.workload import protein
from bionemo_serving.runtimes.choice import cpu_model

ROOT = Path(__file__).resolve().parent.parent
PROTEINS, RESIDUES = 8, 300
"""A request's proteins (--proteins: fewer at larger sizes, so that a step answers enough of them) and residues."""
SWEEP = (1, 2, 4, 8, 16)
OVERLOADS = (2, 4, 8)
REPEATS = MIN_REPEATS
"""Rounds of the saturating concurrency and each overload: the same step's goodput moved by 10-20 % from one step to
the next on these 2-core machines (150M, one client: 370 and 483 tokens/s in two runs), more than the targets'
margin, so each overload is held against the saturation measured in its own round."""
SETTLE_S = 2.0
"""Pause after a step's clients have gone: the calls running when they left end (a few seconds at most)."""
LEAST_SATURATING = 8
"""The overload steps are 2x, 4x and 8x the saturating concurrency, taken as at least this: on 2 cores one client of
8 proteins nearly saturates the 8M default, where 2x and 4x would hardly load it (the sweep says where it saturates)."""
SERVER_TIMEOUT_S = 60
"""BIONEMO_REQUEST_TIMEOUT_S: the clients' own X-Request-Timeout, shorter, is each request's deadline."""
TARGETS = {
    "goodput_share": 0.9,
    "refusal_p99_s": 0.05,
    "lone_p50_ratio": 2.0,
    "memory_growth": 0.10,
}


@dataclass
class Step:
    name: str
    clients: int
    seconds: float
    answered: int = 0
    tokens: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    answered_s: list[float] = field(default_factory=list)
    refused_s: list[float] = field(default_factory=list)
    refused_server_s: list[float] = field(default_factory=list)
    """The same refusals' time in the service, by its `Server-Timing` header (the clients' time where it has none):
    without the network and the clients' own queueing in this one process (a step's clients all start at once, and
    each waits for the others' sends)."""
    lone_s: list[float] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    pss_mib: list[float] = field(default_factory=list)
    triton: dict[str, float] = field(default_factory=dict)
    """esm2nv's compute seconds and calls in Triton over the window (`triton_counters`): where goodput is lost, in
    idle cores (busy share) or in slower calls (seconds a call)."""

    @property
    def goodput(self) -> float:
        return self.tokens / self.seconds

    def summary(self) -> dict:
        def quantile(values: list[float], q: float) -> float | None:
            return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else (values or [None])[0]

        return {
            "step": self.name, "clients": self.clients, "seconds": self.seconds, "answered": self.answered,
            "goodput_tokens_per_s": round(self.goodput, 1), "statuses": self.statuses,
            "answered_p50_s": quantile(self.answered_s, 50), "answered_p99_s": quantile(self.answered_s, 99),
            "refused": len(self.refused_s), "refused_p99_s": quantile(self.refused_s, 99),
            "refused_server_p99_s": quantile(self.refused_server_s, 99),
            "lone_p50_s": quantile(self.lone_s, 50), "lone_requests": len(self.lone_s),
            "readiness_not_200": sum(status != 200 for status in self.ready),
            "pss_mib_max": max(self.pss_mib, default=None), "pss_mib_last": (self.pss_mib or [None])[-1],
            "triton_busy_share": round(self.triton["compute_s"] / self.seconds, 3) if self.triton else None,
            "triton_s_per_call": round(self.triton["compute_s"] / self.triton["calls"], 3) if self.triton.get("calls") else None,
        }  # fmt: skip


def service(repository: Path) -> Server:
    return Server(
        "overload",
        lambda port: [sys.executable, "-m", "bionemo_serving.startup.launch", "service:svc"],
        "/readyz",
        lambda port: {
            "BIONEMO_MODEL_REPOSITORY": str(repository), "BIONEMO_MODELS": "esm2nv", "BIONEMO_PORT": str(port),
            "BIONEMO_REQUEST_TIMEOUT_S": str(SERVER_TIMEOUT_S),
        },
    )  # fmt: skip


def service_pss_mib(running: Running) -> float:
    """PSS of every process of the service, the API side included."""
    root = psutil.Process(running.process.pid)
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += pss_kib(process.pid)[1]
        except (psutil.Error, OSError):
            continue
    return total / 1024


RESIDUE_POOL = protein(random.Random(0), 1_000_000)
"""Where the requests' proteins are cut from: a slice costs nothing, where drawing 300 residues took 40 µs, and the
bodies of a step's 64 clients, drawn one after another in this process, added 40-60 ms to the first ones' times."""


def residues_at(rng: random.Random) -> str:
    """RESIDUES residues at a random place of RESIDUE_POOL."""
    start = rng.randrange(len(RESIDUE_POOL) - RESIDUES)
    return RESIDUE_POOL[start : start + RESIDUES]


def server_timing_s(header: str | None) -> float | None:
    """The seconds of `Server-Timing: total;dur=MS` (bionemo_serving/fronts/bentoml/server_timing.py)."""
    if not header or ";dur=" not in header:
        return None
    return float(header.partition(";dur=")[2].partition(",")[0]) / 1000


async def triton_counters(session: aiohttp.ClientSession, url: str) -> dict[str, float] | None:
    """esm2nv's cumulative compute seconds and successful calls, from Triton's families in GET /metrics (None where
    the scrape did not get them in time)."""
    async with session.get(f"{url}/metrics") as response:
        text = await response.text()
    counters = {"compute_s": 0.0, "calls": 0.0}
    found = False
    for family in prometheus_client.parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != "esm2nv":
                continue
            name = sample.name.removesuffix("_total")  # the parser names a counter's samples ..._total
            if name == "nv_inference_compute_infer_duration_us":
                counters["compute_s"] += sample.value / 1e6
                found = True
            elif name == "nv_inference_request_success":
                counters["calls"] += sample.value
    return counters if found else None


async def count_triton(session: aiohttp.ClientSession, url: str, until: float, step: Step) -> None:
    """Triton's counters at the window's start and end: their difference is the step's."""
    first = await triton_counters(session, url)
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    last = await triton_counters(session, url)
    if first and last:
        step.triton = {name: last[name] - first[name] for name in first}


async def client_loop(
    session: aiohttp.ClientSession, url: str, client: str, deadline_s: float, until: float, step: Step, seed: int,
    lone: bool = False, proteins: int = PROTEINS,
) -> None:
    """Send requests of `proteins` proteins one after the other until `until`; a refusal waits its Retry-After (times
    1 to 1.5)."""
    rng = random.Random(seed)
    headers = {"X-Client-Id": client, "X-Request-Timeout": str(deadline_s)}
    while time.monotonic() < until:
        body = {"sequences": [residues_at(rng) for _ in range(proteins)]}
        began = time.monotonic()
        try:
            async with session.post(f"{url}/embed", json=body, headers=headers) as response:
                await response.read()
                took = time.monotonic() - began
                status, retry_after = response.status, response.headers.get("Retry-After")
                server_s = server_timing_s(response.headers.get("Server-Timing"))
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            # a pooled connection the server closed (uvicorn's keep-alive ends while a client waits its Retry-After),
            # found closed or reset as the request is sent: counted, not an answer; the next request opens another
            step.statuses["disconnected"] = step.statuses.get("disconnected", 0) + 1
            continue
        if time.monotonic() > until and status == 200 and began + took > until:
            break  # answered after the window: not counted
        step.statuses[str(status)] = step.statuses.get(str(status), 0) + 1
        if status == 200:
            if lone:
                step.lone_s.append(took)
            else:
                step.answered += 1
                step.tokens += proteins * (RESIDUES + 2)  # with ESM's <cls> and <eos>
                step.answered_s.append(took)
        elif status in (429, 503):
            step.refused_s.append(took)
            step.refused_server_s.append(took if server_s is None else server_s)  # untimed: the clients' time
            await asyncio.sleep(float(retry_after or 1) * rng.uniform(1.0, 1.5))
        else:
            await asyncio.sleep(0.5)


async def watch(session: aiohttp.ClientSession, running: Running, until: float, step: Step) -> None:
    """Readiness once a second, and the service's PSS every 5 s."""
    last_pss = 0.0
    while time.monotonic() < until:
        async with session.get(f"{running.url}/readyz") as response:
            step.ready.append(response.status)
        if time.monotonic() - last_pss >= 5:
            step.pss_mib.append(await asyncio.to_thread(service_pss_mib, running))
            last_pss = time.monotonic()
        await asyncio.sleep(1)


async def run_step(
    running: Running, name: str, clients: int, seconds: float, deadline_s: float, tenants: int | None = None,
    lone_client: bool = False, proteins: int = PROTEINS,
) -> Step:
    """`clients` closed-loop clients (or connections of that many `tenants`, each one X-Client-Id) for `seconds`, and
    the lone client's requests one at a time where `lone_client`."""
    step = Step(name, clients, seconds)
    until = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=SERVER_TIMEOUT_S + 30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        loops = [
            client_loop(
                session, running.url, f"{name}-{index % (tenants or clients)}", deadline_s, until, step, index,
                proteins=proteins,
            )
            for index in range(clients)
        ]
        if lone_client:
            loops.append(
                client_loop(session, running.url, "lone", deadline_s, until, step, 10_000, lone=True, proteins=proteins)
            )
        clients_gone = [asyncio.ensure_future(loop) for loop in loops]
        try:
            await asyncio.gather(watch(session, running, until, step), count_triton(session, running.url, until, step))
        finally:  # the requests still out are dropped: the service stops what their clients left (not counted)
            for loop in clients_gone:
                loop.cancel()
            await asyncio.gather(*clients_gone, return_exceptions=True)
    await asyncio.sleep(SETTLE_S)
    return step


@dataclass
class ClientFile:
    records: int
    seconds: float
    complete_in_order: bool
    refused: int


async def client_file_under_overload(running: Running, records: int, clients: int, deadline_s: float) -> ClientFile:
    """The CLI on a FASTA of `records` proteins while `clients` connections of 4 tenants load the service."""
    import pyarrow.parquet

    folder = Path(tempfile.mkdtemp(prefix="overload-client-"))
    fasta, output = folder / "proteins.fasta", folder / "embeddings.parquet"
    write_fasta(fasta, records)
    began = time.monotonic()
    cli = asyncio.ensure_future(asyncio.to_thread(run_cli, running.url, fasta, output, None))
    load = asyncio.ensure_future(run_step(running, "client-file", clients, 24 * 3600, deadline_s, tenants=4))
    try:
        await cli
    finally:
        load.cancel()
    seconds = time.monotonic() - began
    ids = pyarrow.parquet.read_table(output, columns=["id"]).column("id").to_pylist()
    errors = folder / "embeddings.errors.csv"
    refused = max(0, len(errors.read_text().splitlines()) - 1) if errors.exists() else 0
    return ClientFile(records, round(seconds, 1), ids == [f"p{index}" for index in range(records)], refused)


def pooled(steps: list[Step]) -> Step:
    """The rounds of one step as one: their answers, refusals, statuses and readiness together."""
    whole = Step(steps[0].name.rsplit(" #", 1)[0], steps[0].clients, sum(step.seconds for step in steps))
    for step in steps:
        whole.answered += step.answered
        whole.tokens += step.tokens
        for status, count in step.statuses.items():
            whole.statuses[status] = whole.statuses.get(status, 0) + count
        whole.answered_s += step.answered_s
        whole.refused_s += step.refused_s
        whole.refused_server_s += step.refused_server_s
        whole.ready += step.ready
        whole.pss_mib += step.pss_mib
    return whole


def factor_name(factor: int) -> str:
    return "saturation" if factor == 1 else f"overload-{factor}x"


def rounds_of(steps: dict[str, Step], name: str) -> list[Step]:
    """The rounds of the step `name`, in order."""
    return [step for key, step in steps.items() if key.rsplit(" #", 1)[0] == name]


def checked(steps: dict[str, Step], deadline_s: float) -> dict[str, dict]:
    """Each target: its value and whether it was met. Goodput: the median of the rounds' ratios, each overload step
    over its round's saturation step; the others over the rounds pooled."""
    results: dict[str, dict] = {}
    saturation = [step.goodput for step in rounds_of(steps, "saturation")]
    for factor in OVERLOADS:
        rounds = rounds_of(steps, factor_name(factor))
        ratios = Spread.of(paired_ratios([step.goodput for step in rounds], saturation))
        results[f"{factor}x goodput / saturation"] = {
            "value": round(ratios.median, 3), "range": [round(ratios.low, 3), round(ratios.high, 3)],
            "target": f">= {TARGETS['goodput_share']}", "met": ratios.median >= TARGETS["goodput_share"],
        }
        summary = pooled(rounds).summary()
        refusal = summary["refused_server_p99_s"] and round(summary["refused_server_p99_s"], 3)
        results[f"{factor}x refusals p99 in the service (s)"] = {
            "value": refusal, "target": f"<= {TARGETS['refusal_p99_s']}",
            "met": refusal is None or refusal <= TARGETS["refusal_p99_s"],
        }
        results[f"{factor}x 504s"] = {"value": summary["statuses"].get("504", 0), "target": "0", "met": "504" not in summary["statuses"]}
    results["fairness 504s"] = {"value": steps["fairness"].statuses.get("504", 0), "target": "0", "met": "504" not in steps["fairness"].statuses}
    answered = {name: pooled(rounds_of(steps, name)) for name in [*map(factor_name, (1, *OVERLOADS)), "fairness"]}
    deadline_misses = {name: round(step.summary()["answered_p99_s"], 3) for name, step in answered.items() if step.answered_s}
    results["answered p99 (s), the slowest step"] = {
        "value": max(deadline_misses.values()), "per_step": deadline_misses, "target": f"<= {deadline_s:g}",
        "met": all(p99 <= deadline_s for p99 in deadline_misses.values()),
    }
    not_ready = sum(step.summary()["readiness_not_200"] for step in steps.values())
    results["readiness not 200"] = {"value": not_ready, "target": "0", "met": not_ready == 0}
    first, last = rounds_of(steps, "saturation")[0].pss_mib[-1], steps["fairness"].pss_mib[-1]
    results["PSS growth over the overload steps"] = {
        "value": round(last / first - 1, 3), "target": f"<= {TARGETS['memory_growth']}",
        "met": last <= first * (1 + TARGETS["memory_growth"]),
    }
    idle, loaded = steps["idle"].summary()["lone_p50_s"], steps["fairness"].summary()["lone_p50_s"]
    ratio = loaded / idle if idle and loaded else None
    results["lone client p50 under a flood / idle"] = {
        "value": round(ratio, 2) if ratio else None, "target": f"<= {TARGETS['lone_p50_ratio']}",
        "met": ratio is not None and ratio <= TARGETS["lone_p50_ratio"],
    }  # fmt: skip
    return results


async def measure(running: Running, seconds: float, deadline_s: float, proteins: int) -> tuple[dict[str, Step], int]:
    """Every step, by name (the rounds' as `name #round`), and the saturating concurrency."""
    steps: dict[str, Step] = {}
    await run_step(running, "warm-up", 4, 10, deadline_s, proteins=proteins)
    steps["idle"] = await run_step(running, "idle", 0, seconds, deadline_s, lone_client=True, proteins=proteins)
    for clients in SWEEP:
        step = steps[f"sweep-{clients}"] = await run_step(running, f"sweep-{clients}", clients, seconds, deadline_s, proteins=proteins)
        print(f"  {clients:>3} clients: {step.goodput:,.0f} tokens/s {step.statuses}", flush=True)
    sweep = {clients: steps[f"sweep-{clients}"].goodput for clients in SWEEP}
    saturating = max(LEAST_SATURATING, min(clients for clients, goodput in sweep.items() if goodput >= 0.9 * max(sweep.values())))
    for repeat, factor in alternating((1, *OVERLOADS), REPEATS):
        name = f"{factor_name(factor)} #{repeat + 1}"
        step = steps[name] = await run_step(running, name, factor * saturating, seconds, deadline_s, proteins=proteins)
        print(f"  {name} ({factor * saturating} clients): {step.goodput:,.0f} tokens/s {step.statuses}", flush=True)
    steps["fairness"] = await run_step(
        running, "fairness", max(OVERLOADS) * saturating, seconds, deadline_s, tenants=1, lone_client=True,
        proteins=proteins,
    )
    return steps, saturating


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--label", default="8M", help="the size the repository holds, for the report")
    parser.add_argument("--seconds", type=float, default=20.0, help="each step's length")
    parser.add_argument("--deadline", type=float, default=5.0, help="each request's X-Request-Timeout")
    parser.add_argument("--proteins", type=int, default=PROTEINS, help=f"proteins of {RESIDUES} residues a request")
    parser.add_argument("--client-file", type=int, default=0, help="proteins of the CLI's FASTA under 4x (0: none)")
    parser.add_argument("--json", type=Path, help="where the raw results go (default: benchmarks/results/)")
    record.add_render_options(parser)
    args = parser.parse_args(argv)
    if args.render:
        return record.render_into_cpu_page(args.render, args.doc, render)
    measured_at = record.commit()  # the code that runs, whatever is committed meanwhile
    running = start(service(args.repository.resolve()), timeout=1800)
    client_file = None
    try:
        print(f"# overload, esm2nv {args.label}, {cpu_model()}, deadline {args.deadline:g} s", flush=True)
        steps, saturating = asyncio.run(measure(running, args.seconds, args.deadline, args.proteins))
        if args.client_file:
            client_file = asyncio.run(client_file_under_overload(running, args.client_file, 4 * saturating, args.deadline))
    finally:
        stop(running)
    targets = checked(steps, args.deadline)
    saturation = Spread.of([step.goodput for step in rounds_of(steps, "saturation")])
    if client_file is not None:
        targets["CLI file under 4x: every record once, in order, none refused"] = {
            "value": asdict(client_file), "target": "complete", "met": client_file.complete_in_order and not client_file.refused,
        }  # fmt: skip
    run = {
        **record.header("overload", argv if argv is not None else sys.argv[1:], measured_at), "label": args.label,
        "deadline_s": args.deadline, "request": {"proteins": args.proteins, "residues": RESIDUES, "tokens": args.proteins * (RESIDUES + 2)},
        "saturation_tokens_per_s": round(saturation.median, 1), "saturating_clients": saturating, "repeats": REPEATS,
        "steps": {name: step.summary() for name, step in steps.items()}, "samples": {name: asdict(step) for name, step in steps.items()},
        "targets": targets,
    }  # fmt: skip
    destination = args.json or record.RESULTS / f"overload-{args.label}.json"
    return record.finish(run, destination, render)


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def render(run: dict) -> str:
    """The run's markdown: what measured it, each step (the rounds' as median and range), each target. The overload
    section of docs/benchmarks-<cpu>.md is this output (`python -m benchmarks.overload --render FILE`)."""
    sweep = ", ".join(
        f"{name.removeprefix('sweep-')}: {step['goodput_tokens_per_s']:,.0f}" for name, step in run["steps"].items() if name.startswith("sweep-")
    )
    lines = [
        f"<!-- overload {run['label']}: begin -->",
        f"esm2nv {run['label']}, {run['cpu']} ({run['cores']} cores), {run['date']}, commit "
        f"{run['commit']}: `{run['command']}`. Requests of {run['request']['proteins']} proteins of "
        f"{run['request']['residues']} residues, X-Request-Timeout {run['deadline_s']:g} s. Sweep (clients: tokens/s): "
        f"{sweep}; saturating concurrency {run['saturating_clients']}. {run['repeats']} rounds of saturation, 2x, 4x, "
        "8x; goodput: median (range); the rest: the rounds together.",
        "",
        "| step | clients | goodput tok/s | answered | refused | 504 | answered p99 s | refusals p99 s: service "
        "| refusals p99 s: clients | lone p50 s | Triton busy s/s | Triton s/call |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    kinds: dict[str, list[dict]] = {}
    for name, step in run["steps"].items():
        if not name.startswith("sweep-"):
            kinds.setdefault(name.rsplit(" #", 1)[0], []).append(step)
    for name, rounds in kinds.items():
        def spread(key: str, digits: int) -> str:
            values = [step[key] for step in rounds if step.get(key) is not None]
            return "" if not values else Spread.of(values).shown(digits).replace(" (1 run)", "")

        together = pooled([Step(**run["samples"][key]) for key in run["samples"] if key.rsplit(" #", 1)[0] == name]).summary()
        statuses = together["statuses"]
        refused = statuses.get("429", 0) + statuses.get("503", 0)
        lines.append(
            f"| {name} | {rounds[0]['clients']} | {spread('goodput_tokens_per_s', 0)} | {statuses.get('200', 0)} | "
            f"{refused} | {statuses.get('504', 0)} | {_seconds(together['answered_p99_s'])} | "
            f"{_seconds(together['refused_server_p99_s'])} | {_seconds(together['refused_p99_s'])} | "
            f"{_seconds(rounds[0]['lone_p50_s'])} | "
            f"{spread('triton_busy_share', 2)} | {spread('triton_s_per_call', 3)} |"
        )  # fmt: skip
    lines += [
        "",
        "| target | value | wanted | |",
        "|---|---|---|---|",
    ]
    for name, target in run["targets"].items():
        value = f"{target['value']} ({target['range'][0]}-{target['range'][1]})" if "range" in target else target["value"]
        lines.append(f"| {name} | {value} | {target['target']} | {'met' if target['met'] else '**missed**'} |")
    lines.append(f"<!-- overload {run['label']}: end -->")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
