"""The client package on files: its throughput against the service's own saturation throughput, and its memory on a
file of a million proteins against one of ten thousand (issue 39, item 4).

    python -m benchmarks.client_files [--sequences 10000] [--million 1000000] [--million-seconds 600]
    python -m benchmarks.client_files --render benchmarks/results/client-files.json [--doc docs/benchmarks-<cpu>.md]

Starts the service (esm2nv alone, the default repository) on a free loopback port and writes a FASTA of
--sequences proteins (random residues, 50 to 150 long). Then, in turn:
1. saturation: the same proteins straight to /embed, 64 a request (the service's limit), base64 answers, from
   SATURATION_THREADS threads: more requests in flight than the service runs at once, so it never waits for one;
2. the CLI (`bionemo-client embed FASTA -o out.parquet`, from .venv-client, its defaults) on the same file: records/s
   over its whole run, start-up included, and its peak RSS (the kernel's high-water mark);
3. the CLI on a FASTA of --million proteins for --million-seconds, then stopped: its peak RSS over that time, which
   must stay under 300 MB and within 10 % of the ten-thousand run's.
Writes the figures and the machine to benchmarks/results/client-files.json and prints their markdown (--render writes
a JSON's between its markers in the CPU's page); exit 1 when a target is missed, after the JSON. Stops what it
started.
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import requests

from benchmarks import record
from benchmarks.processes import ROOT, Server, start, stop
from benchmarks.record import Target

CLIENT = ROOT / ".venv-client" / "bin" / "bionemo-client"
SATURATION_THREADS = 8
REQUEST_SEQUENCES = 64
SHORTEST, LONGEST = 50, 150
RESIDUES = np.frombuffer(b"ACDEFGHIKLMNPQRSTVWY", np.uint8)
TARGETS = {
    "CLI throughput / the service's saturation": Target(">=", 0.9),
    "peak RSS on the large file (MB)": Target("<=", 300),
    "peak RSS change, large file against small (either way)": Target("<=", 0.10),
}


def write_fasta(path: Path, count: int, seed: int = 0) -> list[str]:
    """`count` proteins into `path`, written 10,000 at a time; the first 10,000 returned (the saturation run's)."""
    rng = np.random.default_rng(seed)
    first: list[str] = []
    with path.open("w") as fasta:
        for start_index in range(0, count, 10_000):
            block = min(10_000, count - start_index)
            lengths = rng.integers(SHORTEST, LONGEST + 1, block)
            letters = RESIDUES[rng.integers(0, len(RESIDUES), int(lengths.sum()))].tobytes().decode()
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            sequences = [letters[offsets[i] : offsets[i + 1]] for i in range(block)]
            fasta.write("".join(f">p{start_index + i}\n{seq}\n" for i, seq in enumerate(sequences)))
            if not first:
                first = sequences
    return first


def saturation(url: str, sequences: list[str]) -> float:
    """Sequences/s of /embed over `sequences`, REQUEST_SEQUENCES a request, SATURATION_THREADS requests in flight."""
    batches = [sequences[i : i + REQUEST_SEQUENCES] for i in range(0, len(sequences), REQUEST_SEQUENCES)]
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=SATURATION_THREADS))

    def embed(batch: list[str]) -> int:
        response = session.post(f"{url}/embed", json={"sequences": batch, "encoding_format": "base64"}, timeout=600)
        response.raise_for_status()
        vectors = [np.frombuffer(base64.b64decode(item), "<f4") for item in response.json()["embeddings"]]
        return len(vectors)

    started = time.monotonic()
    with ThreadPoolExecutor(SATURATION_THREADS) as pool:
        answered = sum(pool.map(embed, batches))
    return answered / (time.monotonic() - started)


def run_cli(url: str, fasta: Path, output: Path, seconds: float | None) -> tuple[float, float]:
    """The CLI on `fasta` until it ends (or for `seconds`, then killed): wall seconds and its peak RSS in MB (the
    kernel's high-water mark, from wait4)."""
    command = [str(CLIENT), "embed", str(fasta), "-o", str(output), "--url", url]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if seconds is not None and time.monotonic() - started > seconds:
            os.kill(process.pid, signal.SIGKILL)
            pid, status, usage = os.wait4(process.pid, 0)
            break
        time.sleep(0.2)
    wall = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    if seconds is None and process.returncode != 0:
        raise SystemExit(f"the CLI failed ({process.returncode}): {process.stderr.read()[-2000:]}")
    return wall, usage.ru_maxrss * 1024 / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=10_000)
    parser.add_argument("--million", type=int, default=1_000_000, help="proteins in the large file")
    parser.add_argument("--million-seconds", type=float, default=600.0, help="how long the large file runs")
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--json", type=Path, help="where the figures go (default: benchmarks/results/client-files.json)")
    record.add_render_options(parser)
    args = parser.parse_args(argv)
    if args.render:
        return record.render_into_cpu_page(args.render, args.doc, render)
    if not CLIENT.is_file():
        raise SystemExit(f"{CLIENT} is missing: `make test-client` creates the client's environment")
    measured_at = record.commit()
    server = Server(
        "service",
        lambda port: [sys.executable, "-m", "bionemo_serving.startup.launch", "service:svc"],
        "/readyz",
        lambda port: {"BIONEMO_MODEL_REPOSITORY": str(args.repository), "BIONEMO_MODELS": "esm2nv",
                      "BIONEMO_PORT": str(port)},  # fmt: skip
    )
    with tempfile.TemporaryDirectory(prefix="client-files-") as folder:
        work = Path(folder)
        sequences = write_fasta(work / "small.fasta", args.sequences)
        running = start(server)
        try:
            saturation(running.url, sequences[:256])  # warm
            served = saturation(running.url, sequences)
            small_s, small_peak = run_cli(running.url, work / "small.fasta", work / "small.parquet", None)
            write_fasta(work / "large.fasta", args.million, seed=1)
            large_mb = (work / "large.fasta").stat().st_size / 1e6
            large_s, large_peak = run_cli(running.url, work / "large.fasta", work / "large.parquet", args.million_seconds)
        finally:
            stop(running)
    figures = {
        "saturation_sequences_per_s": round(served, 1), "cli_seconds": round(small_s, 1),
        "cli_sequences_per_s": round(args.sequences / small_s, 1), "small_peak_rss_mb": round(small_peak, 1),
        "large_file_mb": round(large_mb), "large_seconds": round(large_s), "large_peak_rss_mb": round(large_peak, 1),
    }  # fmt: skip
    targets = record.checked(TARGETS, {
        "CLI throughput / the service's saturation": args.sequences / small_s / served,
        "peak RSS on the large file (MB)": large_peak,
        "peak RSS change, large file against small (either way)": abs(large_peak / small_peak - 1),
    })  # fmt: skip
    run = {
        **record.header("client-files", argv if argv is not None else sys.argv[1:], measured_at),
        "sequences": args.sequences, "million": args.million, "lengths": [SHORTEST, LONGEST], **figures, "targets": targets,
    }  # fmt: skip
    return record.finish(run, args.json or record.RESULTS / "client-files.json", render)


def render(run: dict) -> str:
    """The run's markdown, between its markers in docs/benchmarks-<cpu>.md (`--render FILE`)."""
    lines = [
        "<!-- client files: begin -->",
        f"`bionemo-client embed` (its defaults) against esm2nv served alone, proteins of random residues "
        f"{run['lengths'][0]} to {run['lengths'][1]} long; {run['cpu']} ({run['cores']} cores), {run['date']}, commit "
        f"{run['commit']}: `{run['command']}`.",
        "",
        "| | figure |",
        "|---|---:|",
        f"| the service's saturation: the {run['sequences']:,} proteins straight to `/embed`, {REQUEST_SEQUENCES} a "
        f"request, {SATURATION_THREADS} in flight | {run['saturation_sequences_per_s']} sequences/s |",
        f"| the CLI on the same FASTA, start-up to the finished Parquet file | {run['cli_seconds']} s, "
        f"{run['cli_sequences_per_s']} sequences/s |",
        f"| its peak RSS | {run['small_peak_rss_mb']} MB |",
        f"| on a {run['million']:,}-protein FASTA ({run['large_file_mb']} MB), the first {run['large_seconds']} s: peak "
        f"RSS | {run['large_peak_rss_mb']} MB |",
        "",
        "| target | value | wanted | |",
        "|---|---|---|---|",
        *(f"| {name} | {target['value']} | {target['target']} | {record.met_cell(target)} |" for name, target in run["targets"].items()),
        "<!-- client files: end -->",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
