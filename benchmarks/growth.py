"""How cost grows with the model and the protein: /embed tokens/s and a deep mutational scan's time, esm2nv served at
each published size given, for proteins of 100, 300 and 1,000 residues (issue 38, item 4).

    python -m benchmarks.growth 8M=model_repository 150M=model_repository-150M 650M=model_repository-650M
    python -m benchmarks.growth --render benchmarks/results/growth.json [--doc docs/benchmarks-<cpu>.md]

For each size in turn: the service serving esm2nv alone from that repository (its runtime timings taken first where
the repository has none), warmed; then for each length, /embed from USERS users each sending one protein of that
length at a time for --seconds (tokens/s answered, and the requests that timed out, 504, or were refused, 503), and,
once the work timed-out requests left running has ended, /score's scan of one protein of that length: its time where
answered, else the service's own estimate from its 422 (a scan that would outlast the request limit is refused at
once, naming the estimate and ranges that fit). Stops what it started by its PID. Targets: no /embed request ends in
a 504 (admitted work is answered), and every scan is answered or refused within REFUSAL_S. Writes
benchmarks/results/growth.json and prints its markdown (--render writes a JSON's between its markers in the CPU's
page); exit 1 on a miss, after the JSON.
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

from benchmarks import record
from benchmarks.processes import start, stop
from benchmarks.served_memory import USERS, embed_load, esm2nv_server, wait_idle, warm
from benchmarks.workload import protein

LENGTHS = (100, 300, 1000)
ESTIMATE = re.compile(r"take about ([\d,]+) s")
REFUSAL_S = 1.0
"""Longest a scan's refusal may take: it is decided from the estimate, before any work."""


def scan_cost(url: str, length: int) -> dict[str, object]:
    """The scan of a protein of `length` residues: answered in how long, or refused with the service's estimate."""
    sequence = protein(random.Random(length), length)
    began = time.monotonic()
    response = requests.post(f"{url}/score", json={"sequence": sequence, "scan": True}, timeout=3600)
    took = round(time.monotonic() - began, 2)
    if response.status_code == 200:
        return {"status": 200, "seconds": took}
    message = response.json()["error"]["details"][0]["message"]
    estimate = ESTIMATE.search(message) if response.status_code == 422 else None
    return {"status": response.status_code, "seconds": took, "estimate_s": int(estimate.group(1).replace(",", "")) if estimate else None,
            "message": message}  # fmt: skip


def scan_cell(scan: dict[str, object]) -> str:
    if scan["status"] == 200:
        return f"answered in {scan['seconds']:,.1f} s"
    if scan.get("estimate_s"):
        return f"refused in {scan['seconds']:.2f} s: about {scan['estimate_s']:,} s estimated"
    return f"{scan['status']} after {scan['seconds']:.1f} s: {scan['message']}"


def checked(rows: list[dict]) -> dict[str, dict]:
    """Per size and length: no 504 among the /embed requests; the scan answered, or refused at once with an estimate."""
    targets: dict[str, dict] = {}
    for row in rows:
        where = f"{row['size']}, {row['residues']:,} residues"
        timed_out = row["not_answered"].get("504", 0)
        targets[f"{where}: /embed 504s"] = {"value": timed_out, "target": "0", "met": timed_out == 0}
        scan = row["scan"]
        at_once = scan["status"] == 200 or (bool(scan.get("estimate_s")) and scan["seconds"] <= REFUSAL_S)
        targets[f"{where}: scan answered, or refused within {REFUSAL_S:g} s"] = {
            "value": scan_cell(scan), "target": "yes", "met": at_once,
        }
    return targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repositories", nargs="*", help="SIZE=REPOSITORY, in the order to run")
    parser.add_argument("--seconds", type=float, default=20.0, help="each length's load (make bench-growth's)")
    parser.add_argument("--json", type=Path, help="where the figures go (default: benchmarks/results/growth.json)")
    record.add_render_options(parser)
    args = parser.parse_args(argv)
    if args.render:
        return record.render_into_cpu_page(args.render, args.doc, render)
    if not args.repositories:
        parser.error("give at least one SIZE=REPOSITORY")
    measured_at = record.commit()
    rows = []
    for given in args.repositories:
        size, _, repository = given.partition("=")
        running = start(esm2nv_server(Path(repository).resolve()), timeout=3600)
        try:
            warm(running.url)
            for length in LENGTHS:
                tokens_per_s, refused = embed_load(running.url, args.seconds, length)
                wait_idle(psutil.Process(running.process.pid))  # what timed-out requests left running ends first
                rows.append({
                    "size": size, "residues": length, "tokens_per_s": round(tokens_per_s, 1),
                    "not_answered": {str(status): count for status, count in sorted(refused.items())},
                    "scan": scan_cost(running.url, length),
                })  # fmt: skip
                print(rows[-1], file=sys.stderr, flush=True)
        finally:
            stop(running)
    targets = checked(rows)
    run = {
        **record.header("growth", argv if argv is not None else sys.argv[1:], measured_at), "users": USERS,
        "seconds": args.seconds, "rows": rows, "targets": targets,
    }  # fmt: skip
    return record.finish(run, args.json or record.RESULTS / "growth.json", render)


def render(run: dict) -> str:
    """The run's markdown, between its markers in docs/benchmarks-<cpu>.md (`--render FILE`)."""
    lines = [
        "<!-- growth: begin -->",
        f"esm2nv served alone; `/embed` from {run['users']} users, one protein each, {run['seconds']:g} s; then a scan "
        f"of one protein; {run['cpu']} "
        f"({run['cores']} cores), {run['date']}, commit {run['commit']}: `{run['command']}`.",
        "",
        "| size | residues | `/embed` tokens/s | `/embed` not answered | scan by masked marginals | |",
        "|---|---:|---:|---|---|---|",
    ]
    for row in run["rows"]:
        where = f"{row['size']}, {row['residues']:,} residues"
        met = all(target["met"] for name, target in run["targets"].items() if name.startswith(f"{where}:"))
        failures = ", ".join(f"{count} x {status}" for status, count in row["not_answered"].items()) or "none"
        lines.append(
            f"| {row['size']} | {row['residues']:,} | {row['tokens_per_s']:,.0f} | {failures} | {scan_cell(row['scan'])} | "
            f"{'met' if met else '**missed**'} |"
        )
    lines.append("<!-- growth: end -->")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
