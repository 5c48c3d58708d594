"""esm2nv served from a repository (a published size's, say): start-up time, memory per process before, during and
after /embed at 16 users, a 300-residue scan, through the real service (issue 38, items 2, 4 and 5); its JSON, its
targets.

    python -m benchmarks.served_memory --repository model_repository-150M [--seconds 30]
    python -m benchmarks.served_memory --render benchmarks/results/served-memory-model_repository-150M-<cpu>.json

Starts `bionemo_serving.startup.launch service:svc` serving esm2nv alone on a free loopback port; times start-up to ready;
warms every capability (embed, logits, score, contacts, layers); reads, after IDLE_S idle, each process's RSS and PSS
(/proc/PID/smaps_rollup: shared pages split among their users, so the PSS of all processes adds up to what they hold
together), grouped: tritonserver, each python-backend stub (named by its model), the API side (BentoML's arbiter and
workers). Then /embed at 16 users for --seconds (tokens/s), the memory read every SAMPLE_S meanwhile; once the work
that load left running has ended (requests that timed out leave theirs to finish), the memory again; then a
300-residue scan by masked marginal: answered, or refused at once (the 422's message), and then the first range the
refusal suggests, timed. Stops what it started by its PID. The JSON (benchmarks/results/served-memory-<repository>-
<cpu>.json) holds every sample; the targets (TARGETS) are held on the whole service, the API side included, at its
highest; a miss exits 1 after the JSON is written.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import onnx
import psutil
import requests

from benchmarks import record
from benchmarks.processes import Server, start, stop
from benchmarks.workload import protein

IDLE_S = 10
USERS = 16
SAMPLE_S = 2.0
"""How often the memory is read during the load."""
API_SIDE = "API side (bentoml, workers)"
SCAN_RESIDUES = 300
STUB_MODEL = re.compile(r"/([^/ ]+)/\d+/model\.py")
SUGGESTED_RANGE = re.compile(r"e\.g\. \[(\d+), (\d+)\]")
TARGETS: dict[str, record.Target] = {
    "start-up to ready (s)": record.Target("<=", 120),
    "whole service PSS at its peak, during and after the load / the FP32 weights": record.Target("<=", 1.5),
}
"""- start-up 120 s: a replica that is restarted or scaled out must serve within two minutes, its runtime timings
  recorded beforehand (`make bench MODEL_SIZE=...` runs bionemo_serving.runtimes.choice first; a first start that times them is
  minutes more, and is not what this holds);
- PSS 1.5x: every graph and instance maps one copy of the weights (bionemo_serving/runtimes/engines.py MAPPED_FROM_MIB), so what the
  machine holds for the whole service, the API side (BentoML's workers) with tritonserver and its stubs, at its
  highest under load, may exceed the weights by half for the runtimes' working memory and the processes themselves.
  At 8M (about 30 MiB of weights) those fixed hundreds of MiB dominate: the bound is for the published sizes."""


def pss_kib(pid: int) -> tuple[int, int]:
    """RSS and PSS of `pid` in KiB."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Rss", "Pss"):
            values[key] = int(rest.split()[0])
    return values["Rss"], values["Pss"]


def processes(root: psutil.Process) -> dict[str, list[tuple[int, int]]]:
    """RSS and PSS (KiB) of every process under `root`, grouped: tritonserver, each stub by model, the API side."""
    found: dict[str, list[tuple[int, int]]] = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            command = " ".join(process.cmdline())
            memory = pss_kib(process.pid)
        except (psutil.Error, OSError):
            continue
        if "tritonserver" in process.name():
            group = "tritonserver"
        elif (stub := STUB_MODEL.search(command)) and "stub" in command:
            group = f"stub {stub.group(1)}"
        else:
            group = API_SIDE
        found.setdefault(group, []).append(memory)
    return found


def weights_bytes(repository: Path) -> int:
    """The FP32 weights of esm2nv: the tensors the layers graph's ONNX file names (each graph holds the whole encoder;
    the layers graph is never quantized), wherever they lie (model.weights, shared by every graph)."""
    graph = onnx.load(str(repository / "esm2nv_layers" / "1" / "model.onnx"), load_external_data=False).graph
    return sum(
        int(next(entry.value for entry in tensor.external_data if entry.key == "length"))
        if tensor.data_location == onnx.TensorProto.EXTERNAL
        else len(tensor.raw_data)
        for tensor in graph.initializer
    )


def warm(url: str) -> None:
    proteins = ["MKTAYIAKQRQISFVKSHFSRQ" * 4, "MSLKRKNIALIPAAGIGVRFG"]
    for path, body in (
        ("/embed", {"sequences": proteins}),
        ("/embed", {"sequences": proteins, "layers": [1]}),
        ("/logits", {"sequences": proteins}),
        ("/score", {"sequence": proteins[0], "mutations": ["K2R"]}),
        ("/contacts", {"sequences": proteins}),
    ):
        response = requests.post(f"{url}{path}", json=body, timeout=600)
        response.raise_for_status()


def esm2nv_server(repository: Path) -> Server:
    """The service serving esm2nv alone from `repository`, on a free loopback port."""
    return Server(
        "service",
        lambda port: [sys.executable, "-m", "bionemo_serving.startup.launch", "service:svc"],
        "/readyz",
        lambda port: {"BIONEMO_MODEL_REPOSITORY": str(repository), "BIONEMO_MODELS": "esm2nv", "BIONEMO_PORT": str(port)},
    )


def embed_load(url: str, seconds: float, length: int | None = None) -> tuple[float, Counter[int]]:
    """Tokens per second answered over /embed from USERS users, each sending one or 8 proteins at a time (one of
    `length` residues, where given), and how many requests were refused (503: the queue was full) or timed out (504),
    by status."""
    deadline = time.monotonic() + seconds

    def user(index: int) -> tuple[int, Counter[int]]:
        rng, tokens, refused = random.Random(index), 0, Counter[int]()
        while time.monotonic() < deadline:
            sequences = [protein(rng, length) for _ in range(rng.choice((1, 8)) if length is None else 1)]
            response = requests.post(f"{url}/embed", json={"sequences": sequences}, timeout=600)
            if response.status_code in (503, 504):
                refused[response.status_code] += 1
                continue
            response.raise_for_status()
            tokens += sum(len(sequence) + 2 for sequence in sequences)
        return tokens, refused

    started = time.monotonic()
    with ThreadPoolExecutor(USERS) as pool:
        results = list(pool.map(user, range(USERS)))
    return sum(tokens for tokens, _ in results) / (time.monotonic() - started), sum((r for _, r in results), Counter())


def wait_idle(root: psutil.Process, timeout: float = 1800.0, busy_percent: float = 20.0) -> float:
    """Seconds until the processes under `root` use less than `busy_percent` of one core together, measured over 2 s:
    work whose request timed out runs to its end, and a request sent before it has would queue behind it."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        tree = [root, *root.children(recursive=True)]
        for process in tree:
            _cpu_percent(process)  # starts its interval
        time.sleep(2)
        if sum(map(_cpu_percent, tree)) < busy_percent:
            break
    return time.monotonic() - started


def _cpu_percent(process: psutil.Process) -> float:
    """Its share of a core since the last call; 0 for a process that has ended."""
    try:
        return process.cpu_percent()
    except psutil.Error:
        return 0.0


class PssSampler:
    """The service's memory per group (`processes`) every SAMPLE_S, in a thread, while a load runs: a peak under load
    is what the machine must hold, not the idle figure before it."""

    def __init__(self, root: psutil.Process, started: float) -> None:
        self.root, self.started = root, started
        self.samples: list[dict[str, Any]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stopped.wait(SAMPLE_S):
            self.samples.append(pss_sample(self.root, self.started))

    def __enter__(self) -> PssSampler:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join()


def pss_sample(root: psutil.Process, started: float) -> dict[str, Any]:
    """Every group's [RSS, PSS] KiB per process, at `t` seconds since `started`."""
    return {"t": round(time.monotonic() - started, 1), "groups": processes(root)}


def total_mib(sample: dict[str, Any], api_side: bool = True) -> float:
    """A sample's PSS summed over its processes, in MiB; without the API side where `api_side` is False."""
    return sum(
        pss for group, memories in sample["groups"].items() if api_side or group != API_SIDE for _, pss in memories
    ) / 1024


def figures(run: dict[str, Any]) -> dict[str, float | None]:
    """Each target's figure: start-up seconds; the whole service's (API side included) highest PSS, during the load
    or after it, over the FP32 weights."""
    loaded = [*run["pss"]["during"], run["pss"]["after"]]
    return {
        "start-up to ready (s)": run["ready_s"],
        "whole service PSS at its peak, during and after the load / the FP32 weights": max(map(total_mib, loaded))
        / run["weights_mib"],
    }


def scan(url: str) -> dict[str, Any]:
    """A SCAN_RESIDUES-residue scan: answered, or refused (the 422's message) and then its first suggested range."""
    sequence = protein(random.Random(SCAN_RESIDUES), SCAN_RESIDUES)
    began = time.monotonic()
    response = requests.post(f"{url}/score", json={"sequence": sequence, "scan": True}, timeout=3600)
    outcome: dict[str, Any] = {"status": response.status_code, "seconds": round(time.monotonic() - began, 2)}
    if response.status_code == 200:
        return outcome
    outcome["message"] = message = response.json()["error"]["details"][0]["message"]
    if suggested := SUGGESTED_RANGE.search(message):
        first, last = int(suggested.group(1)), int(suggested.group(2))
        body = {"sequence": sequence, "scan": True, "scan_positions": [first, last]}
        began = time.monotonic()
        answer = requests.post(f"{url}/score", json=body, timeout=3600)
        outcome["range"] = {
            "positions": [first, last], "status": answer.status_code, "seconds": round(time.monotonic() - began, 1),
            "error": None if answer.ok else answer.text[:200],
        }  # fmt: skip
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, help="the repository served (required unless --render)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path, help="the raw results (default: benchmarks/results/served-memory-...)")
    parser.add_argument("--render", type=Path, help="print the markdown of a run's JSON, and nothing else")
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    if args.repository is None:
        parser.error("--repository is required")
    measured_at = record.commit()  # the code that runs, whatever is committed meanwhile
    repository = args.repository.resolve()
    run: dict[str, Any] = record.header("served-memory", argv if argv is not None else sys.argv[1:], measured_at)
    run |= {"repository": str(args.repository), "weights_mib": weights_bytes(repository) / 2**20, "users": USERS}
    started = time.monotonic()
    running = start(esm2nv_server(repository), timeout=1800)
    run["ready_s"] = round(time.monotonic() - started, 1)
    try:
        print(f"# esm2nv from {args.repository}, {run['cpu']}; start-up to ready {run['ready_s']:.0f} s", flush=True)
        root = psutil.Process(running.process.pid)
        warm(running.url)
        time.sleep(IDLE_S)
        run["pss"] = {"idle": pss_sample(root, started)}
        with PssSampler(root, started) as sampler:
            tokens_per_s, refused = embed_load(running.url, args.seconds)
        run["load"] = {"seconds": args.seconds, "tokens_per_s": round(tokens_per_s, 1), "refused": dict(refused)}
        run["load"]["drained_s"] = round(wait_idle(root), 1)
        run["pss"] |= {"during": sampler.samples, "after": pss_sample(root, started)}
        run["scan"] = scan(running.url)
    finally:
        stop(running)
    run["targets"] = record.checked(TARGETS, figures(run))
    destination = args.json or record.RESULTS / (
        f"served-memory-{args.repository.name}-{record.cpu_slug(run['cpu'])}.json"
    )
    record.write(run, destination)
    print(render(run))
    print(f"wrote {destination}")
    return record.exit_status(run["targets"])


def _group_table(sample: dict[str, Any]) -> list[str]:
    lines = ["| process | count | RSS MiB | PSS MiB |", "|---|---:|---:|---:|"]
    for group, memories in sorted(sample["groups"].items()):
        rss, pss = (sum(values) / 1024 for values in zip(*memories, strict=True))
        lines.append(f"| {group} | {len(memories)} | {rss:,.0f} | {pss:,.0f} |")
    return lines


def render(run: dict[str, Any]) -> str:
    """The run's markdown: start-up, memory per process idle, at the load's peak and after it, the load, the scan,
    each target."""
    pss, load, scanned = run["pss"], run["load"], run["scan"]
    peak = max(pss["during"], key=total_mib) if pss["during"] else None
    refused = ", ".join(f"{count} answered {status}" for status, count in sorted(load["refused"].items()))
    lines = [
        f"esm2nv served from {run['repository']}, {run['cpu']} ({run['cores']} cores), {run['date']}, commit "
        f"{run['commit']}: `{run['command']}`. Start-up to ready {run['ready_s']:.0f} s; FP32 weights "
        f"{run['weights_mib']:,.0f} MiB. PSS (/proc/PID/smaps_rollup) of every process of the service, the API side "
        f"included: {len(pss['during'])} samples during the load, every {SAMPLE_S:g} s.",
        "",
        "| when | whole service PSS MiB | tritonserver and stubs PSS MiB | x FP32 weights (whole) |",
        "|---|---:|---:|---:|",
    ]
    for label, sample in (("idle, before the load", pss["idle"]), ("peak during the load", peak),
                          ("after the load, its work drained", pss["after"])):  # fmt: skip
        if sample is not None:
            whole = total_mib(sample)
            lines.append(
                f"| {label} (t {sample['t']:g} s) | {whole:,.0f} | {total_mib(sample, api_side=False):,.0f} "
                f"| {whole / run['weights_mib']:.2f} |"
            )
    for label, sample in (("Idle", pss["idle"]), ("At the load's peak", peak)):
        if sample is not None:
            lines += ["", f"{label}, per process:", "", *_group_table(sample)]
    lines += [
        "",
        f"- /embed at {run['users']} users for {load['seconds']:g} s: {load['tokens_per_s']:,.0f} tokens/s answered "
        f"({refused or 'none refused'}); the work it left running ended {load['drained_s']:.0f} s after it",
        f"- a {SCAN_RESIDUES}-residue scan: "
        + (
            f"answered in {scanned['seconds']:.1f} s"
            if scanned["status"] == 200
            else f"{scanned['status']} in {scanned['seconds']:.2f} s: {scanned['message']}"
        ),
    ]
    if "range" in scanned:
        answer = scanned["range"]
        outcome = "answered" if answer["error"] is None else f"{answer['status']} ({answer['error']})"
        lines.append(f"- its first suggested range, {answer['positions']}: {outcome} in {answer['seconds']:.1f} s")
    lines += ["", "| target | value | wanted | |", "|---|---:|---|---|"]
    for name, target in run["targets"].items():
        value = "not measured" if target["value"] is None else f"{target['value']:g}"
        lines.append(f"| {name} | {value} | {target['target']} | {record.met_cell(target)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
