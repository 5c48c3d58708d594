"""`make soak`: minutes of mixed traffic at a concurrency that saturates the machine; no failed request, flat memory.

    python -m benchmarks.soak [--seconds 300] [--rounds 5] [--users 24] [--margin 5] [--runtime RUNTIME] [--json FILE]

Starts the service as `make bench` does (with `--runtime`, every graph forced to it, as BIONEMO_RUNTIME does), sends
it the largest requests the load can send (`prime`), then runs locust headless with /embed, /generate and head-graph
(/logits, /score, /contacts, `layers`) users side by side (`EmbedUser`, `GenerateUser`, `HeadsUser`) in `--rounds`
rounds. After each round, with nothing in flight and the decoder's last call always the same one step of one row
(`last_decoder_call`), it reads the settled resident memory of the API side (`bentoml serve` and its workers), of
tritonserver and of each Triton model instance (its python-backend stub): memory is flat when, for each of them, the
last round's is within `--margin` % of the first's. Settled, because under load memory
moves with what is in flight (an answer of 8 contact maps of 1,022 residues is 8 M floats in the API worker that
writes it; the decoder holds the caches of every row being decoded): medians under load moved up and down by 5-10 %
between fifths of a run with no trend, while what a process keeps stays when the load stops. The medians under load
of every round are reported beside, the API side's and tritonserver's with its stubs. Writes
`benchmarks/results/soak.json` (each round's settled reading and medians under load) and prints its markdown
(`--render FILE` writes it into the CPU's page); exits 1 when a request failed or settled memory grew past the margin,
after the JSON is written.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import requests

from benchmarks import processes, record
from benchmarks.contenders.this_service import SERVICE
from benchmarks.workload import DRUG_SMILES, MAX_RESIDUES, MODEL, SAMPLES_PER_SEED, SEQUENCES_PER_REQUEST
from bionemo_serving.model_catalog import MODELS
from bionemo_serving.preprocessing import tokenizer_for
from bionemo_serving.preprocessing.batching import bucket_width
from bionemo_serving.runtimes.engines import Runtime

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- soak: begin -->", "<!-- soak: end -->"

USER_CLASSES = ("EmbedUser", "GenerateUser", "HeadsUser")
"""locustfile.py's users the soak runs, in equal numbers."""


TRITONSERVER = "tritonserver"
API_SIDE = "API side (bentoml serve, workers)"
TRITON_TOGETHER = "tritonserver and its stubs, together"
SETTLE_S = 3.0
"""Seconds from the end of a round to its settled reading: past FreedMemory's interval (1 s), when every stub has
handed back what its last calls freed."""
DECODER_MODEL = "megamolbart"


def triton_part(process: psutil.Process) -> str | None:
    """`tritonserver`, the instance a python-backend stub runs (e.g. `esm2nv_0_1`: its argument before the last), or
    None for the API side."""
    name = Path(process.exe()).name
    if "triton_python_backend_stub" in name:
        return process.cmdline()[-2]
    return TRITONSERVER if TRITONSERVER in name else None


def sample_memory(root: psutil.Process) -> dict[str, float]:
    """Resident memory (MiB) of the API side, of tritonserver and of each model instance of the service's tree, now."""
    memory = {API_SIDE: 0.0}
    for process in [root, *root.children(recursive=True)]:
        try:
            rss, part = process.memory_info().rss, triton_part(process) or API_SIDE
        except psutil.NoSuchProcess:
            continue
        memory[part] = memory.get(part, 0.0) + rss / 2**20
    return memory


def special_tokens() -> int:
    """Tokens a protein of the model has beside its residues (<cls>, <eos>)."""
    return tokenizer_for(MODELS[MODEL]).max_model_tokens - MAX_RESIDUES


def primed_lengths() -> list[int]:
    """A protein length for each of the model's length buckets, its widest: an arena's largest working set is not at
    the longest input (the attention budget's pieces of long rows hold few rows) but at whichever width lets the most
    rows into one piece, which depends on the runtime (esm2nv on fused onnxruntime: 160-224 tokens)."""
    tokens = tokenizer_for(MODELS[MODEL]).max_model_tokens
    return sorted(
        {bucket_width(length + special_tokens(), tokens) - special_tokens() for length in range(1, MAX_RESIDUES + 1)}
    )


def piece_filling(residues: int, at_most: int) -> int:
    """Requests of the most proteins of `residues` that fill one attention-budget piece, at most `at_most`: all the
    contacts graph's single instance has to meet once. More at once would only queue: 8 requests of 8 proteins of
    1,022 residues are a minute of its work on 2 cores, and the last waited past the Triton call's limit (504)."""
    rows = max(1, MODELS[MODEL].batching.attention_budget // (residues + special_tokens()) ** 2)
    return min(at_most, -(-rows // SEQUENCES_PER_REQUEST[1]))


def prime(url: str, users: int) -> None:
    """Send the largest requests the load sends, as many at once as users of one kind: 8 proteins of each of
    primed_lengths() to /embed, /logits (which asks every token), /embed with every layer the load asks and (as many
    at once as fill a piece: piece_filling) /contacts, then the longest seed molecule with the most samples. The many
    rows of one length reach every instance in merged batches of the most rows."""
    at_once = max(1, users // len(USER_CLASSES))
    largest = []
    for path, options in (("/embed", {}), ("/logits", {}), ("/embed", {"layers": [0, 1, -2, -1]}), ("/contacts", {})):
        for length in primed_lengths():
            proteins = {"sequences": ["M" * length] * SEQUENCES_PER_REQUEST[1], "model": MODEL} | options
            largest.append((path, proteins, piece_filling(length, at_once) if path == "/contacts" else at_once))
    generate = {"smiles": [max(DRUG_SMILES, key=len)], "num_samples": SAMPLES_PER_SEED[1], "seed": 0}
    with concurrent.futures.ThreadPoolExecutor(at_once) as pool:
        for path, body, count in [*largest, ("/generate", generate, at_once)]:
            answers = pool.map(lambda _: requests.post(f"{url}{path}", json=body, timeout=600), range(count))
            for answer in answers:
                answer.raise_for_status()


def run_locust(url: str, users: int, seconds: float) -> Counter[tuple[str, str]]:
    """Requests and failures per endpoint of one headless run, from locust's CSV; it ends once the requests in
    flight have been answered."""
    prefix = Path(tempfile.mkdtemp(prefix="soak-")) / "soak"
    command = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "locustfile.py"), *USER_CLASSES, "--headless", "--users",
        str(users), "--spawn-rate", str(users), "--run-time", f"{seconds:g}s", "--host", url, "--stop-timeout", "60",
        "--csv", str(prefix), "--only-summary", "--loglevel", "ERROR", "--exit-code-on-error", "0",
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=seconds + 180)
    lines = (prefix.parent / "soak_stats.csv").read_text().splitlines()
    header = lines[0].split(",")
    counts: Counter[tuple[str, str]] = Counter()
    for row in (dict(zip(header, line.split(","))) for line in lines[1:]):
        counts[row["Name"], "requests"] += int(row["Request Count"])
        counts[row["Name"], "failed"] += int(row["Failure Count"])
    return counts


@dataclass
class Round:
    under_load: list[dict[str, float]]
    """Samples taken while the round's load ran."""
    settled: dict[str, float]
    """Read SETTLE_S after the round, with nothing in flight but the decoder's last call (`last_decoder_call`)."""


def last_decoder_call(url: str) -> None:
    """One cached step of one row over a source five wide: the decoder's last call before every settled reading, so
    that each reading follows the same call. Read after whatever call ended the round, OpenVINO's decoder stub went
    200, 209, 230, 213 and 231 MiB, up and down; after this one its memory moves only when the runtime keeps more
    (what the decoder's check in `make test` did before it moved here, docs/reliability.md)."""
    models = requests.get(f"{url}/models", timeout=60).json()["models"]
    (hidden_size,) = [model["hidden_size"] for model in models if model["name"] == DECODER_MODEL]
    hiddens = np.random.default_rng(0).standard_normal((1, 5, hidden_size))
    body = {"hiddens": hiddens.tolist(), "mask": [[1] * 5], "max_length": 1}
    requests.post(f"{url}/decode", json=body, timeout=60).raise_for_status()


def load_round(url: str, users: int, seconds: float, root: psutil.Process, every: float) -> tuple[Round, Counter]:
    """One round of the load, sampling memory every `every` seconds while it runs, then its settled reading."""
    under_load: list[dict[str, float]] = []
    stopping = threading.Event()

    def sample() -> None:
        while not stopping.wait(every):
            under_load.append(sample_memory(root))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        counts = run_locust(url, users, seconds)
    finally:
        stopping.set()
        sampler.join()
    time.sleep(SETTLE_S)
    last_decoder_call(url)
    return Round(under_load, sample_memory(root)), counts


def growth(first: float, last: float) -> float:
    """From `first` to `last`, in %."""
    return 100 * (last - first) / first


def memory_rows(parts: list[str], readings: list[dict[str, float]]) -> list[str]:
    """Report rows: each part's MiB in each reading, and its growth from the first to the last."""
    rows = []
    for part in parts:
        values = [reading.get(part, 0.0) for reading in readings]
        figures = " | ".join(f"{value:.0f}" for value in values)
        rows.append(f"| {part} | {figures} | {growth(values[0], values[-1]):+.1f} % |")
    return rows


def summarized(rounds: list[Round], counts: Counter[tuple[str, str]], margin: float) -> dict:
    """The run's figures and targets: requests and failures per endpoint, each round's settled memory and median
    under load per part, no failed request, and every part's settled memory flat within `margin` %."""
    tritons = sorted({part for measured in rounds for part in measured.settled} - {API_SIDE})
    parts = [API_SIDE, *tritons]
    for reading in [measured.settled for measured in rounds] + [sample for m in rounds for sample in m.under_load]:
        reading[TRITON_TOGETHER] = sum(reading.get(part, 0.0) for part in tritons)
    settled = [
        {part: round(measured.settled.get(part, 0.0), 1) for part in [*parts, TRITON_TOGETHER]} for measured in rounds
    ]
    under_load = [
        {part: round(float(np.median([sample.get(part, 0.0) for sample in measured.under_load])), 1)
         for part in (API_SIDE, TRITON_TOGETHER)}
        for measured in rounds
    ]  # fmt: skip
    endpoints = sorted({name for name, _ in counts} - {"Aggregated"}) + ["Aggregated"]
    failures = sum(counts[name, "failed"] for name in endpoints if name != "Aggregated")
    largest = max(growth(settled[0][part], settled[-1][part]) for part in parts)
    return {
        "requests": {name: {"requests": counts[name, "requests"], "failed": counts[name, "failed"]} for name in endpoints},
        "settled_mib": settled, "under_load_mib": under_load,
        "targets": {
            "failed requests": {"value": failures, "target": "0", "met": failures == 0},
            "largest settled growth, first round to last (%)": {
                "value": round(largest, 1), "target": f"<= {margin:g}", "met": largest <= margin,
            },
        },
    }  # fmt: skip


def render(run: dict) -> str:
    """The run's markdown, between its markers: what measured it, the requests, the targets, the settled memory of
    every part and the medians under load. The soak section of docs/benchmarks-<cpu>.md is this output
    (`python -m benchmarks.soak --render FILE`)."""
    rounds = len(run["settled_mib"])
    header = [f"| process | {' | '.join(f'round {number}' for number in range(1, rounds + 1))} | growth |"]
    header.append("|---|" + "---:|" * (rounds + 1))
    return "\n".join([
        BEGIN,
        f"{run['cpu']} ({run['cores']} cores), {run['date']}, commit {run['commit']}: `{run['command']}`. {run['users']} "
        f"users, {rounds} rounds of {run['round_seconds']:g} s after the largest requests; runtimes: {run['runtimes']}.",
        "",
        "| what | figure |",
        "|---|---|",
        *(f"| {name} | {counted['requests']} requests, {counted['failed']} failed |"
          for name, counted in run["requests"].items()),
        *(f"| {name} | {target['value']} (wanted {target['target']}): {record.met_cell(target)} |"
          for name, target in run["targets"].items()),
        "",
        f"Settled resident memory (MiB), read {SETTLE_S:g} s after each round with nothing in flight (judged):",
        "",
        *header,
        *memory_rows(list(run["settled_mib"][0]), run["settled_mib"]),
        "",
        f"Under load: the median of samples every {run['sample_s']:g} s of each round (moves with what is in flight):",
        "",
        *header,
        *memory_rows(list(run["under_load_mib"][0]), run["under_load_mib"]),
        END,
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=300, help="how long the load runs, all rounds together")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of load, memory read settled after each")
    parser.add_argument("--users", type=int, default=24, help="concurrent users, a third of each kind")
    parser.add_argument("--sample", type=float, default=5, help="seconds between memory samples under load")
    parser.add_argument("--margin", type=float, default=5, help="largest settled growth, %%, still called flat")
    parser.add_argument(
        "--runtime", choices=[runtime.value for runtime in Runtime], help="every graph on it (BIONEMO_RUNTIME)"
    )
    parser.add_argument("--json", type=Path, help="where the raw results go (default: benchmarks/results/soak.json)")
    record.add_render_options(parser)
    args = parser.parse_args(argv)
    if args.render:
        return record.render_into_cpu_page(args.render, args.doc, render)
    if args.rounds < 2:
        parser.error("--rounds: at least 2, the first and the last compared")

    measured_at = record.commit()  # the code that runs, whatever is committed meanwhile
    service = SERVICE
    if args.runtime is not None:
        forced = {"BIONEMO_RUNTIME": args.runtime}
        service = dataclasses.replace(SERVICE, environment=lambda port: SERVICE.environment(port) | forced)
    running = processes.start(service)
    rounds: list[Round] = []
    counts: Counter[tuple[str, str]] = Counter()
    try:
        prime(running.url, args.users)
        root = psutil.Process(running.process.pid)
        for _ in range(args.rounds):
            measured, round_counts = load_round(running.url, args.users, args.seconds / args.rounds, root, args.sample)
            rounds.append(measured)
            counts += round_counts
    finally:
        processes.stop(running)
    run = {
        **record.header("soak", argv if argv is not None else sys.argv[1:], measured_at), "users": args.users,
        "round_seconds": args.seconds / args.rounds, "sample_s": args.sample,
        "runtimes": f"{args.runtime}, forced" if args.runtime else "each graph's, as the timings chose",
        **summarized(rounds, counts, args.margin),
    }  # fmt: skip
    return record.finish(run, args.json or record.RESULTS / "soak.json", render)


if __name__ == "__main__":
    sys.exit(main())
