"""How cost grows with the model and the protein: /embed tokens/s and a deep mutational scan's time, esm2nv served at
each published size given, for proteins of 100, 300 and 1,000 residues (issue 38, item 4).

    python -m benchmarks.growth 8M=model_repository 150M=model_repository-150M 650M=model_repository-650M

For each size in turn: the service serving esm2nv alone from that repository (its runtime timings taken first where
the repository has none), warmed; then for each length, /embed from USERS users each sending one protein of that
length at a time for --seconds (tokens/s answered, and the requests that timed out, 504, or were refused, 503), and,
once the work timed-out requests left running has ended, /score's scan of one protein of that length: its time where
answered, else the service's own estimate from its 422 (a scan that would outlast the request limit is refused at
once, naming the estimate and ranges that fit). Stops what it started by its PID.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

import psutil
import requests

from benchmarks.processes import start, stop
from benchmarks.served_memory import USERS, embed_load, esm2nv_server, wait_idle, warm
from benchmarks.workload import protein
from bionemo_serving.runtimes.choice import cpu_model

LENGTHS = (100, 300, 1000)
ESTIMATE = re.compile(r"take about ([\d,]+) s")


def scan_cost(url: str, length: int) -> str:
    """The scan of a protein of `length` residues: answered in how long, or refused with the service's estimate."""
    sequence = protein(random.Random(length), length)
    began = time.monotonic()
    response = requests.post(f"{url}/score", json={"sequence": sequence, "scan": True}, timeout=3600)
    took = time.monotonic() - began
    if response.status_code == 200:
        return f"{took:,.1f} s"
    message = response.json()["error"]["details"][0]["message"]
    if response.status_code == 422 and (estimate := ESTIMATE.search(message)):
        return f"refused in {took:.2f} s: about {estimate.group(1)} s estimated"
    return f"{response.status_code} after {took:.1f} s: {message}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repositories", nargs="+", help="SIZE=REPOSITORY, in the order to run")
    parser.add_argument("--seconds", type=float, default=20.0, help="each length's load (make bench-growth's)")
    args = parser.parse_args(argv)
    rows = []
    for given in args.repositories:
        size, _, repository = given.partition("=")
        running = start(esm2nv_server(Path(repository).resolve()), timeout=3600)
        try:
            warm(running.url)
            for length in LENGTHS:
                tokens_per_s, refused = embed_load(running.url, args.seconds, length)
                wait_idle(psutil.Process(running.process.pid))  # what timed-out requests left running ends first
                failures = ", ".join(f"{count} x {status}" for status, count in sorted(refused.items())) or "none"
                rows.append(f"| {size} | {length:,} | {tokens_per_s:,.0f} | {failures} | {scan_cost(running.url, length)} |")
                print(rows[-1], file=sys.stderr, flush=True)
        finally:
            stop(running)
    print(f"# esm2nv served, {cpu_model()}; /embed: {USERS} users, one protein a request, {args.seconds:.0f} s each")
    print("| size | residues | /embed tokens/s | /embed not answered | scan by masked marginals |")
    print("|---|---:|---:|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
