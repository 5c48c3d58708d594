"""`make soak`: minutes of mixed traffic at a concurrency that saturates the machine; no failed request, flat memory.

    python -m benchmarks.soak [--seconds 300] [--users 24] [--margin 5] [--runtime RUNTIME] [--out docs/reliability.md]

Starts the service as `make bench` does (with `--runtime`, every graph forced to it, as BIONEMO_RUNTIME does),
runs locust headless with /embed, /generate and head-graph (/logits, /score, /contacts, `layers`) users side by side
(`EmbedUser`, `GenerateUser`, `HeadsUser`), and samples every
`--sample` seconds the resident memory of the API side (`bentoml serve` and its workers), of tritonserver, and of
each Triton model instance (its python-backend stub). Memory is flat when, for the API side and for every model
instance, the median of the last fifth of the run is within `--margin` % of the median of its first fifth, both
after `--warmup` seconds of load (onnxruntime's arenas and the decoder's cache arrays grow to the shapes they meet,
then stay); each instance's medians of all five fifths show how its growth went over the run. Writes the figures
between the markers of `docs/reliability.md`; exits 1 when a request failed or memory grew past the margin.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import requests

from benchmarks import processes
from benchmarks.contenders.this_service import SERVICE
from benchmarks.workload import DRUG_SMILES, MAX_RESIDUES, MODEL, SAMPLES_PER_SEED, SEQUENCES_PER_REQUEST
from exporter.triton_backend.runtimes import Runtime
from model_catalog import MODELS
from preprocessing import tokenizer_for
from preprocessing.batching import bucket_width
from serving.startup.runtime_choice import cpu_model

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- soak: begin -->", "<!-- soak: end -->"

USER_CLASSES = ("EmbedUser", "GenerateUser", "HeadsUser")
"""locustfile.py's users the soak runs, in equal numbers."""


TRITONSERVER = "tritonserver"


@dataclass(frozen=True)
class Sample:
    seconds: float
    api_mib: float
    triton_mib: dict[str, float]
    """tritonserver's own, and each model instance's (its python-backend stub, by Triton's instance name)."""


def triton_part(process: psutil.Process) -> str | None:
    """`tritonserver`, the instance a python-backend stub runs (e.g. `esm2nv_0_1`: its argument before the last), or
    None for the API side."""
    name = Path(process.exe()).name
    if "triton_python_backend_stub" in name:
        return process.cmdline()[-2]
    return TRITONSERVER if TRITONSERVER in name else None


def sample_memory(root: psutil.Process, started: float) -> Sample:
    """Resident memory of the API side, of tritonserver and of each model instance of the service's tree, now."""
    api, triton = 0, {}
    for process in [root, *root.children(recursive=True)]:
        try:
            rss, part = process.memory_info().rss, triton_part(process)
        except psutil.NoSuchProcess:
            continue
        if part is None:
            api += rss
        else:
            triton[part] = triton.get(part, 0) + rss / 2**20
    return Sample(time.monotonic() - started, api / 2**20, triton)


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


def run_locust(url: str, users: int, seconds: float) -> dict[str, str]:
    """Locust's summary of a headless run: requests and failures per endpoint, from its CSV."""
    prefix = Path(tempfile.mkdtemp(prefix="soak-")) / "soak"
    command = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "locustfile.py"), *USER_CLASSES, "--headless", "--users",
        str(users), "--spawn-rate", str(users), "--run-time", f"{seconds:g}s", "--host", url, "--stop-timeout", "60",
        "--csv", str(prefix), "--only-summary", "--loglevel", "ERROR", "--exit-code-on-error", "0",
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=seconds + 180)
    lines = (prefix.parent / "soak_stats.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","))) for line in lines[1:]]
    return {row["Name"]: f"{row['Request Count']} requests, {row['Failure Count']} failed" for row in rows} | {
        "failures": str(sum(int(row["Failure Count"]) for row in rows if row["Name"] != "Aggregated"))
    }


def fifths(values: list[float]) -> list[float]:
    """The medians of each fifth of `values`, in order."""
    return [float(np.median(part)) for part in np.array_split(np.asarray(values), min(5, len(values)))]


def growth(values: list[float]) -> float:
    """From the first fifth's median to the last's, in %."""
    medians = fifths(values)
    return 100 * (medians[-1] - medians[0]) / medians[0]


def memory_row(what: str, values: list[float]) -> str:
    """A report row: the medians of the fifths of one part's RSS, and its growth from the first to the last."""
    return f"| {what} | {' | '.join(f'{median:.0f}' for median in fifths(values))} | {growth(values):+.1f} % |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=300, help="how long the load runs")
    parser.add_argument("--users", type=int, default=24, help="concurrent users, a third of each kind")
    parser.add_argument("--sample", type=float, default=5, help="seconds between memory samples")
    parser.add_argument(
        "--warmup", type=float, default=60, help="seconds of load before memory counts (arenas and caches fill)"
    )
    parser.add_argument("--margin", type=float, default=5, help="largest memory growth, %%, still called flat")
    parser.add_argument(
        "--runtime", choices=[runtime.value for runtime in Runtime], help="every graph on it (BIONEMO_RUNTIME)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    service = SERVICE
    if args.runtime is not None:
        forced = {"BIONEMO_RUNTIME": args.runtime}
        service = dataclasses.replace(SERVICE, environment=lambda port: SERVICE.environment(port) | forced)
    running = processes.start(service)
    samples: list[Sample] = []
    stopping = threading.Event()
    try:
        prime(running.url, args.users)
        root, started = psutil.Process(running.process.pid), time.monotonic()

        def sample() -> None:
            while not stopping.wait(args.sample):
                if time.monotonic() - started > args.warmup:
                    samples.append(sample_memory(root, started))

        sampler = threading.Thread(target=sample)
        sampler.start()
        summary = run_locust(running.url, args.users, args.seconds)
        stopping.set()
        sampler.join()
    finally:
        stopping.set()
        processes.stop(running)

    parts = sorted({part for s in samples for part in s.triton_mib})
    series = {"API side (bentoml serve, workers)": [s.api_mib for s in samples]}
    series |= {part: [s.triton_mib.get(part, 0.0) for s in samples] for part in parts}
    whole = {"tritonserver and its stubs, together": [sum(s.triton_mib.values()) for s in samples]}
    failures = int(summary.pop("failures"))
    grown = {what: growth(values) for what, values in series.items()}
    flat = max(grown.values()) <= args.margin
    command = "python -m benchmarks.soak " + shlex.join(argv if argv is not None else sys.argv[1:])
    sampling = f"memory every {args.sample:g} s after the largest requests and {args.warmup:g} s of warm-up"
    runtimes = f"{args.runtime}, forced" if args.runtime else "each graph's, as the timings chose"
    lines = [
        BEGIN,
        f"Measured with `{command}` ({args.users} users, {args.seconds:g} s; {sampling}) on "
        f"{cpu_model()}; runtimes: {runtimes}:",
        "",
        "| what | figure |",
        "|---|---|",
        *(f"| {name} | {figure} |" for name, figure in summary.items()),
        f"| failed requests | {failures} |",
        f"| memory flat within {args.margin:g} % (the API side and every model instance) | {'yes' if flat else 'no'} |",
        "",
        "Resident memory (MiB), the median of each fifth of the run, and the growth from the first fifth to the last:",
        "",
        "| process | 1st | 2nd | 3rd | 4th | 5th | growth |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(memory_row(what, values) for what, values in (series | whole).items()),
        "",
        END,
    ]
    text = args.out.read_text()
    args.out.write_text(text[: text.index(BEGIN)] + "\n".join(lines) + text[text.index(END) + len(END) :])
    print("\n".join(lines[1:-1]))
    return 0 if failures == 0 and flat else 1


if __name__ == "__main__":
    sys.exit(main())
