"""esm2nv served from a repository (a published size's, say): start-up time, memory per process, /embed at 16 users
and a 300-residue scan, through the real service (issue 38, items 2, 4 and 5).

    python -m benchmarks.served_memory --repository model_repository-150M [--seconds 30]

Starts `serving.startup.launch service:svc` serving esm2nv alone on a free loopback port; times start-up to ready;
warms every capability (embed, logits, score, contacts, layers); then reads, after IDLE_S idle, each process's RSS
and PSS (/proc/PID/smaps_rollup: shared pages split among their users, so the PSS of all processes adds up to what
they hold together) for tritonserver, each python-backend stub (named by its model) and the API side; compares the
sum of tritonserver's and its stubs' PSS with the size of the FP32 weights. Then /embed at 16 users for --seconds
(tokens/s); once the work that load left running has ended (requests that timed out leave theirs to finish), a
300-residue scan by masked marginal: answered, or refused at once (the 422's message), and then the first range the
refusal suggests, timed. Stops what it started by its PID.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import onnx
import psutil
import requests

from benchmarks.processes import Server, start, stop
from benchmarks.workload import protein
from runtimes.choice import cpu_model

IDLE_S = 10
USERS = 16
SCAN_RESIDUES = 300
STUB_MODEL = re.compile(r"/([^/ ]+)/\d+/model\.py")
SUGGESTED_RANGE = re.compile(r"e\.g\. \[(\d+), (\d+)\]")


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
            group = "API side (bentoml, workers)"
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
        lambda port: [sys.executable, "-m", "serving.startup.launch", "service:svc"],
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    repository = args.repository.resolve()
    started = time.monotonic()
    running = start(esm2nv_server(repository), timeout=1800)
    ready_s = time.monotonic() - started
    try:
        print(f"# esm2nv from {args.repository}, {cpu_model()}; start-up to ready {ready_s:.0f} s", flush=True)
        warm(running.url)
        time.sleep(IDLE_S)
        groups = processes(psutil.Process(running.process.pid))
        print("| process | count | RSS MiB | PSS MiB |\n|---|---:|---:|---:|")
        for group, memories in sorted(groups.items()):
            rss, pss = (sum(values) / 1024 for values in zip(*memories))
            print(f"| {group} | {len(memories)} | {rss:,.0f} | {pss:,.0f} |")
        served = sum(pss for group, memories in groups.items() if not group.startswith("API") for _, pss in memories)
        weights = weights_bytes(repository) / 2**20
        print(f"- tritonserver and its stubs: PSS {served / 1024:,.0f} MiB = {served / 1024 / weights:.2f}x the FP32 "
              f"weights ({weights:,.0f} MiB; target 1.5x)")  # fmt: skip
        tokens_per_s, refused = embed_load(running.url, args.seconds)
        failures = ", ".join(f"{count} answered {status}" for status, count in sorted(refused.items())) or "none refused"
        print(f"- /embed at {USERS} users: {tokens_per_s:,.0f} tokens/s answered ({failures})", flush=True)
        drained = wait_idle(psutil.Process(running.process.pid))
        print(f"- work left running by timed-out requests ended {drained:.0f} s after the load", flush=True)
        scan = protein(random.Random(SCAN_RESIDUES), SCAN_RESIDUES)
        began = time.monotonic()
        response = requests.post(f"{running.url}/score", json={"sequence": scan, "scan": True}, timeout=3600)
        took = time.monotonic() - began
        if response.status_code == 200:
            print(f"- a {SCAN_RESIDUES}-residue scan: answered in {took:.1f} s")
        else:
            message = response.json()["error"]["details"][0]["message"]
            print(f"- a {SCAN_RESIDUES}-residue scan: {response.status_code} in {took:.2f} s: {message}")
            if suggested := SUGGESTED_RANGE.search(message):
                first, last = int(suggested.group(1)), int(suggested.group(2))
                body = {"sequence": scan, "scan": True, "scan_positions": [first, last]}
                began = time.monotonic()
                answer = requests.post(f"{running.url}/score", json=body, timeout=3600)
                outcome = "answered" if answer.ok else f"{answer.status_code} ({answer.text[:200]})"
                print(f"- its first suggested range, [{first}, {last}]: {outcome} in {time.monotonic() - began:.1f} s")
    finally:
        stop(running)
    return 0


if __name__ == "__main__":
    sys.exit(main())
