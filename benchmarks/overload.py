"""`make bench`'s overload step: /embed held past capacity, against its own saturation in the same run.

    python -m benchmarks.overload [--repository model_repository] [--label 8M] [--seconds 20] [--deadline 5]
                                  [--proteins 8] [--json overload-8M.json]

Starts the service serving esm2nv alone from --repository on a free loopback port, and:
1. a lone client's requests one at a time on the idle service: their p50 latency;
2. closed-loop clients (1, 2, 4, 8, 16), each its own X-Client-Id, every request --proteins of 300 residues with
   X-Request-Timeout --deadline: the saturation goodput (tokens answered per second, the most of these) and the
   saturating concurrency S (the fewest clients within 10 % of it, at least LEAST_SATURATING);
3. 2S, 4S and 8S such clients, each waiting the Retry-After it is told (with jitter) before it sends again;
4. one client flooding with 8S connections, while the lone client sends its requests one at a time: their p50;
5. (--client-file N) `bionemo-client embed` (from .venv-client) on a FASTA of N proteins while 4 other clients, S
   connections each, hold the service at 4x: its file has every record once, in order, none refused.
Throughout, GET /readyz once a second and the PSS of every process of the service (tritonserver, its stubs, the API
side) before, during and after each step. Then the targets, each checked: goodput >= 0.9x saturation at every
overload, refusals answered within 50 ms p99, no 504, answered p99 within the deadline, readiness 200 throughout,
memory flat (PSS after the last step within 10 % of that after saturation), the lone client's p50 within 2x of the
idle one's. Exit 1 on a miss, after the JSON is written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import psutil

from benchmarks import record
from benchmarks.client_files import run_cli, write_fasta
from benchmarks.processes import Running, Server, start, stop
from benchmarks.served_memory import pss_kib
from benchmarks.workload import protein
from bionemo_serving.runtimes.choice import cpu_model

ROOT = Path(__file__).resolve().parent.parent
PROTEINS, RESIDUES = 8, 300
"""A request's proteins (--proteins: fewer at larger sizes, so that a step answers enough of them) and residues."""
SWEEP = (1, 2, 4, 8, 16)
OVERLOADS = (2, 4, 8)
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
    lone_s: list[float] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    pss_mib: list[float] = field(default_factory=list)

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
            "lone_p50_s": quantile(self.lone_s, 50), "lone_requests": len(self.lone_s),
            "readiness_not_200": sum(status != 200 for status in self.ready),
            "pss_mib_max": max(self.pss_mib, default=None), "pss_mib_last": (self.pss_mib or [None])[-1],
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


async def client_loop(
    session: aiohttp.ClientSession, url: str, client: str, deadline_s: float, until: float, step: Step, seed: int,
    lone: bool = False, proteins: int = PROTEINS,
) -> None:
    """Send requests of `proteins` proteins one after the other until `until`; a refusal waits its Retry-After (times
    1 to 1.5)."""
    rng = random.Random(seed)
    headers = {"X-Client-Id": client, "X-Request-Timeout": str(deadline_s)}
    while time.monotonic() < until:
        body = {"sequences": [protein(rng, RESIDUES) for _ in range(proteins)]}
        began = time.monotonic()
        try:
            async with session.post(f"{url}/embed", json=body, headers=headers) as response:
                await response.read()
                took = time.monotonic() - began
                status, retry_after = response.status, response.headers.get("Retry-After")
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
        await asyncio.gather(*loops, watch(session, running, until, step))
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


def checked(steps: dict[str, Step], saturation: float, deadline_s: float) -> dict[str, dict]:
    """Each target: its value and whether it was met."""
    results: dict[str, dict] = {}
    for factor in OVERLOADS:
        step = steps[f"overload-{factor}x"]
        summary = step.summary()
        results[f"{factor}x goodput / saturation"] = {
            "value": round(step.goodput / saturation, 3), "target": f">= {TARGETS['goodput_share']}",
            "met": step.goodput >= TARGETS["goodput_share"] * saturation,
        }
        refusal = summary["refused_p99_s"] and round(summary["refused_p99_s"], 3)
        results[f"{factor}x refusals p99 (s)"] = {
            "value": refusal, "target": f"<= {TARGETS['refusal_p99_s']}",
            "met": refusal is None or refusal <= TARGETS["refusal_p99_s"],
        }
        results[f"{factor}x 504s"] = {"value": step.statuses.get("504", 0), "target": "0", "met": "504" not in step.statuses}
    deadline_misses = {name: round(step.summary()["answered_p99_s"], 3) for name, step in steps.items() if step.answered_s}
    results["answered p99 within the deadline"] = {
        "value": deadline_misses, "target": "<= deadline", "met": all(p99 <= deadline_s for p99 in deadline_misses.values()),
    }
    not_ready = sum(step.summary()["readiness_not_200"] for step in steps.values())
    results["readiness not 200"] = {"value": not_ready, "target": "0", "met": not_ready == 0}
    first, last = steps["saturation"].pss_mib[-1], steps["fairness"].pss_mib[-1]
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


async def measure(
    running: Running, seconds: float, deadline_s: float, proteins: int
) -> tuple[dict[str, Step], float, int]:
    steps: dict[str, Step] = {}
    await run_step(running, "warm-up", 4, 10, deadline_s, proteins=proteins)
    steps["idle"] = await run_step(running, "idle", 0, seconds, deadline_s, lone_client=True, proteins=proteins)
    sweep = {}
    for clients in SWEEP:
        sweep[clients] = await run_step(running, f"sweep-{clients}", clients, seconds, deadline_s, proteins=proteins)
        print(f"  {clients:>3} clients: {sweep[clients].goodput:,.0f} tokens/s {sweep[clients].statuses}", flush=True)
    best = max(step.goodput for step in sweep.values())
    saturating = min(clients for clients, step in sweep.items() if step.goodput >= 0.9 * best)
    steps["saturation"] = max(sweep.values(), key=lambda step: step.goodput)
    saturating = max(saturating, LEAST_SATURATING)
    for factor in OVERLOADS:
        step = await run_step(running, f"overload-{factor}x", factor * saturating, seconds, deadline_s, proteins=proteins)
        steps[f"overload-{factor}x"] = step
        print(f"  {factor}x ({factor * saturating} clients): {step.goodput:,.0f} tokens/s {step.statuses}", flush=True)
    steps["fairness"] = await run_step(
        running, "fairness", max(OVERLOADS) * saturating, seconds, deadline_s, tenants=1, lone_client=True,
        proteins=proteins,
    )
    return steps, best, saturating


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--label", default="8M", help="the size the repository holds, for the report")
    parser.add_argument("--seconds", type=float, default=20.0, help="each step's length")
    parser.add_argument("--deadline", type=float, default=5.0, help="each request's X-Request-Timeout")
    parser.add_argument("--proteins", type=int, default=PROTEINS, help=f"proteins of {RESIDUES} residues a request")
    parser.add_argument("--client-file", type=int, default=0, help="proteins of the CLI's FASTA under 4x (0: none)")
    parser.add_argument("--json", type=Path, help="where the raw results go (default: benchmarks/results/)")
    parser.add_argument("--render", type=Path, help="print the markdown of a run's JSON, and nothing else")
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    measured_at = record.commit()  # the code that runs, whatever is committed meanwhile
    running = start(service(args.repository.resolve()), timeout=1800)
    client_file = None
    try:
        print(f"# overload, esm2nv {args.label}, {cpu_model()}, deadline {args.deadline:g} s", flush=True)
        steps, saturation, saturating = asyncio.run(measure(running, args.seconds, args.deadline, args.proteins))
        if args.client_file:
            client_file = asyncio.run(client_file_under_overload(running, args.client_file, 4 * saturating, args.deadline))
    finally:
        stop(running)
    targets = checked(steps, saturation, args.deadline)
    if client_file is not None:
        targets["CLI file under 4x: every record once, in order, none refused"] = {
            "value": asdict(client_file), "target": "complete", "met": client_file.complete_in_order and not client_file.refused,
        }  # fmt: skip
    run = {
        **record.header("overload", argv if argv is not None else sys.argv[1:], measured_at), "label": args.label,
        "deadline_s": args.deadline, "request": {"proteins": args.proteins, "residues": RESIDUES, "tokens": args.proteins * (RESIDUES + 2)},
        "saturation_tokens_per_s": round(saturation, 1), "saturating_clients": saturating,
        "steps": {name: step.summary() for name, step in steps.items()}, "samples": {name: asdict(step) for name, step in steps.items()},
        "targets": targets,
    }  # fmt: skip
    destination = args.json or ROOT / "benchmarks" / "results" / f"overload-{args.label}.json"
    record.write(run, destination)
    print(render(run))
    print(f"wrote {destination}")
    return record.exit_status(targets)


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def render(record: dict) -> str:
    """The run's markdown: what measured it, each step, each target. docs/performance.md's overload tables are this
    output (`python -m benchmarks.overload --render FILE`)."""
    lines = [
        f"esm2nv {record['label']}, {record['cpu']} ({record['cores']} cores), {record['date']}, commit "
        f"{record['commit']}: `{record['command']}`. Requests of {record['request']['proteins']} proteins of "
        f"{record['request']['residues']} residues, X-Request-Timeout {record['deadline_s']:g} s; saturation "
        f"{record['saturation_tokens_per_s']:,.0f} tokens/s; overload steps at 2x, 4x, 8x of "
        f"{record['saturating_clients']} clients.",
        "",
        "| step | clients | goodput tok/s | answered | refused | 504 | answered p99 s | refusals p99 s | lone p50 s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, step in record["steps"].items():
        statuses = step["statuses"]
        refused = statuses.get("429", 0) + statuses.get("503", 0)
        lines.append(
            f"| {name} | {step['clients']} | {step['goodput_tokens_per_s']:,.0f} | {statuses.get('200', 0)} | {refused} | "
            f"{statuses.get('504', 0)} | {_seconds(step['answered_p99_s'])} | {_seconds(step['refused_p99_s'])} | "
            f"{_seconds(step['lone_p50_s'])} |"
        )  # fmt: skip
    lines += ["", "| target | value | wanted | |", "|---|---|---|---|"]
    for name, target in record["targets"].items():
        lines.append(f"| {name} | {target['value']} | {target['target']} | {'met' if target['met'] else '**missed**'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
