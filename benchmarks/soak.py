"""`make soak`: minutes of mixed traffic at a concurrency that saturates the machine; no failed request, flat memory.

    python -m benchmarks.soak [--seconds 300] [--users 24] [--margin 10] [--out docs/reliability.md]

Starts the service as `make bench` does, runs locust headless with /embed and
/generate users side by side (`EmbedUser`, `GenerateUser`), and samples every
`--sample` seconds the resident memory of the API side (`bentoml serve` and its
workers) and of tritonserver with its python-backend stubs. Memory is flat when
the median of the last fifth of the run is within `--margin` % of the median of
its first fifth, both after `--warmup` seconds of load (onnxruntime's arenas and
the decoder's cache arrays grow to the shapes they meet, then stay). Writes the figures
between the markers of `docs/reliability.md`; exits 1 when a request failed or
memory grew past the margin.
"""

from __future__ import annotations

import argparse
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

from benchmarks import processes
from benchmarks.contenders.this_service import SERVICE

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- soak: begin -->", "<!-- soak: end -->"


@dataclass(frozen=True)
class Sample:
    seconds: float
    api_mib: float
    triton_mib: float


def _is_triton(process: psutil.Process) -> bool:
    return any(part in Path(process.exe()).name for part in ("tritonserver", "triton_python_backend_stub"))


def sample_memory(root: psutil.Process, started: float) -> Sample:
    """Resident memory of the API side and of Triton's side of the service's process tree, now."""
    api = triton = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            rss = process.memory_info().rss
            if _is_triton(process):
                triton += rss
            else:
                api += rss
        except psutil.NoSuchProcess:
            continue
    return Sample(time.monotonic() - started, api / 2**20, triton / 2**20)


def run_locust(url: str, users: int, seconds: float) -> dict[str, str]:
    """Locust's summary of a headless run: requests and failures per endpoint, from its CSV."""
    prefix = Path(tempfile.mkdtemp(prefix="soak-")) / "soak"
    command = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "locustfile.py"), "EmbedUser", "GenerateUser", "--headless",
        "--users", str(users), "--spawn-rate", str(users), "--run-time", f"{seconds:g}s", "--host", url,
        "--stop-timeout", "60", "--csv", str(prefix), "--only-summary", "--loglevel", "ERROR", "--exit-code-on-error", "0",
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=seconds + 180)
    lines = (prefix.parent / "soak_stats.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","))) for line in lines[1:]]
    return {row["Name"]: f'{row["Request Count"]} requests, {row["Failure Count"]} failed' for row in rows} | {
        "failures": str(sum(int(row["Failure Count"]) for row in rows if row["Name"] != "Aggregated"))
    }


def fifths(values: list[float]) -> tuple[float, float]:
    """The medians of the first and of the last fifth of `values`."""
    fifth = max(1, len(values) // 5)
    return float(np.median(values[:fifth])), float(np.median(values[-fifth:]))


def memory_row(what: str, values: list[float]) -> tuple[str, float]:
    """A report row for one side's RSS, and its growth in %."""
    first, last = fifths(values)
    growth = 100 * (last - first) / first
    return f"| {what} RSS, median of the first -> last fifth | {first:.0f} -> {last:.0f} MiB ({growth:+.1f} %) |", growth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=300, help="how long the load runs")
    parser.add_argument("--users", type=int, default=24, help="concurrent users, half /embed and half /generate")
    parser.add_argument("--sample", type=float, default=5, help="seconds between memory samples")
    parser.add_argument(
        "--warmup", type=float, default=60, help="seconds of load before memory counts (arenas and caches fill)"
    )
    parser.add_argument("--margin", type=float, default=10, help="largest memory growth, %%, still called flat")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    running = processes.start(SERVICE)
    samples: list[Sample] = []
    stopping = threading.Event()
    try:
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

    api_row, api_growth = memory_row("API side (bentoml serve, workers)", [s.api_mib for s in samples])
    triton_row, triton_growth = memory_row("tritonserver and its stubs", [s.triton_mib for s in samples])
    failures = int(summary.pop("failures"))
    flat = max(api_growth, triton_growth) <= args.margin
    command = "python -m benchmarks.soak " + shlex.join(argv if argv is not None else sys.argv[1:])
    sampling = f"memory every {args.sample:g} s after {args.warmup:g} s of warm-up"
    lines = [
        BEGIN,
        f"Measured with `{command}` ({args.users} users, {args.seconds:g} s; {sampling}):",
        "",
        "| what | figure |",
        "|---|---|",
        *(f"| {name} | {figure} |" for name, figure in summary.items()),
        f"| failed requests | {failures} |",
        api_row,
        triton_row,
        f"| memory flat within {args.margin:g} % | {'yes' if flat else 'no'} |",
        "",
        END,
    ]
    text = args.out.read_text()
    args.out.write_text(text[: text.index(BEGIN)] + "\n".join(lines) + text[text.index(END) + len(END) :])
    print("\n".join(lines[1:-1]))
    return 0 if failures == 0 and flat else 1


if __name__ == "__main__":
    sys.exit(main())
