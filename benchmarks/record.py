"""What every benchmark's JSON record carries, its targets checked, and its markdown written into the docs: one place,
so that no two benchmarks describe the machine, the code or a miss differently (benchmarks/results/*.json)."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import psutil

from bionemo_serving.runtimes.choice import cpu_model

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def commit() -> str:
    """HEAD, with `+changes` where tracked files differ from it."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    )
    return (head or "no git") + ("+changes" if changed.stdout.strip() else "")


def vector_flags(cpuinfo: str | None = None) -> list[str]:
    """The CPU's vector and matrix extensions (avx*, amx*, fma): what a record's figures depend on beside its model."""
    text = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    for line in text.splitlines():
        if line.startswith("flags"):
            return sorted(flag for flag in line.partition(":")[2].split() if flag.startswith(("avx", "amx", "fma")))
    return []


def cpu_slug(model: str) -> str:
    """A CPU's model name as a file name, without trademarks and "Processor": "Intel(R) Xeon(R) Processor" ->
    intel-xeon, "AMD EPYC" -> amd-epyc."""
    name = re.sub(r"\((r|tm)\)|\b(processor|cpu)\b", " ", model.lower())
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown-cpu"


def header(benchmark: str, argv: Sequence[str], measured_at: str) -> dict[str, Any]:
    """The fields every record opens with: which benchmark, on what machine, at which code (`measured_at`: commit()
    read before the run, so that a commit made meanwhile is not claimed), from which exact command line."""
    return {
        "benchmark": benchmark, "cpu": cpu_model(), "cores": psutil.cpu_count(), "flags": vector_flags(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "commit": measured_at, "python": platform.python_version(),
        "command": " ".join([f"python -m benchmarks.{benchmark.replace('-', '_')}", *argv]),
    }  # fmt: skip


def machine(packages: Sequence[str]) -> dict[str, Any]:
    """What else the figures depend on, read before anything starts: memory, load, cores, the packages' versions."""
    return {
        "logical_cpus": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load": [round(value, 2) for value in os.getloadavg()],
        "packages": {name: metadata.version(name) for name in packages},
    }


def write(record: Mapping[str, Any], destination: Path) -> Path:
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(json.dumps(record, indent=1) + "\n")
    return destination


@dataclass(frozen=True)
class Target:
    """A figure's bound: at least (`>=`) or at most (`<=`) `bound`."""

    comparison: Literal[">=", "<="]
    bound: float

    def met(self, value: float) -> bool:
        return value >= self.bound if self.comparison == ">=" else value <= self.bound

    def __str__(self) -> str:
        return f"{self.comparison} {self.bound:g}"


def checked(
    targets: Mapping[str, Target], figures: Mapping[str, float | None], not_applicable: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Each target's figure and whether it was met. A figure that was not measured (None, or absent) misses: a run that
    did not measure a target cannot claim it. `not_applicable`: targets this run cannot hold, and why (met: None)."""
    results: dict[str, dict[str, Any]] = {}
    for name, target in targets.items():
        if name in (not_applicable or {}):
            results[name] = {"value": None, "target": str(target), "met": None, "why": not_applicable[name]}
            continue
        value = figures.get(name)
        measured = value is not None and not math.isnan(value)
        results[name] = {
            "value": (value if isinstance(value, int) else float(f"{value:.4g}")) if measured else None,
            "target": str(target),
            "met": measured and target.met(value),
        }
    return results


def missed(targets: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return [name for name, target in targets.items() if target["met"] is False]


def exit_status(targets: Mapping[str, Mapping[str, Any]]) -> int:
    """1 where a target was missed (named on stdout), else 0: the last thing a benchmark does, after its JSON."""
    misses = missed(targets)
    if misses:
        print(f"missed: {'; '.join(misses)}")
    return 1 if misses else 0


def met_cell(target: Mapping[str, Any]) -> str:
    """A target's state as a table cell."""
    return {True: "met", False: "**missed**", None: f"not applicable: {target.get('why', '')}"}[target["met"]]


def write_section(doc: Path, text: str) -> None:
    """`text`, whose first and last lines are its markers, in place of what those markers of `doc` held; at its end
    where it has none (a CPU's page before this benchmark first ran on it), or as the page where there is none."""
    lines = text.splitlines()
    begin, end = lines[0], lines[-1]
    before = doc.read_text() if doc.is_file() else ""
    if begin not in before:
        doc.write_text(f"{before.rstrip()}\n\n{text}\n" if before else f"{text}\n")
        return
    doc.write_text(before[: before.index(begin)] + text + before[before.index(end) + len(end) :])


def render_into_doc(run_json: Path, doc: Path, render: Callable[[dict[str, Any]], str]) -> int:
    """`--render`: the section `render` makes of the run at `run_json`, written between its markers in `doc` and
    printed; the exit status."""
    text = render(json.loads(run_json.read_text()))
    write_section(doc, text)
    print(text)
    return 0


def add_render_options(parser: argparse.ArgumentParser) -> None:
    """--render and --doc: a run's markdown written into a page, instead of a run."""
    parser.add_argument("--render", type=Path, help="write this JSON's markdown into --doc, and nothing else")
    parser.add_argument("--doc", type=Path, help="the markdown file --render writes into (default: docs/benchmarks-<cpu>.md)")


def render_into_cpu_page(run_json: Path, doc: Path | None, render: Callable[[dict[str, Any]], str]) -> int:
    """`--render`: into `doc`, or the page of the CPU that measured the run."""
    page = doc or ROOT / "docs" / f"benchmarks-{cpu_slug(json.loads(run_json.read_text())['cpu'])}.md"
    return render_into_doc(run_json, page, render)


def finish(run: Mapping[str, Any], destination: Path, render: Callable[[dict[str, Any]], str]) -> int:
    """A run's end: its record written, its markdown printed, the exit status of its targets."""
    write(run, destination)
    print(render(dict(run)))
    print(f"wrote {destination}")
    return exit_status(run["targets"])
