"""training.json: how a checkpoint was made, accumulated over every session that trained it.

The record travels inside the checkpoint and is written beside it at each save, so the two always agree: a session
killed between saves loses its steps since the last save from both. Exports copy it and build the model card from it.
"""

from __future__ import annotations

import json
import platform
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import transformers

RECORD_FILE = "training.json"
LOSS_POINTS = 200
"""At most this many loss points are kept: past it every other one is dropped, so a long run's curve stays short."""
REPOSITORY = Path(__file__).resolve().parents[2]
RUN_CODE = tuple(f"bionemo_serving/{path}" for path in ("training", "preprocessing", "exporter", "model_catalog.py"))
"""What a run's weights depend on: the trainer, the tokenizer and vocabulary, the exporter's MBart config."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def cpu_model() -> str:
    """/proc/cpuinfo's first model name (the CPU the benchmarks name too), or the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> dict[str, Any]:
    """The commit the training code ran at, and whether the code a run depends on differed from it (a change, or a
    file git does not track yet: either way the commit alone does not say what ran)."""

    def git(*arguments: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(REPOSITORY), *arguments], check=False, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--", *RUN_CODE)
    return {"commit": git("rev-parse", "HEAD"), "modified": None if status is None else bool(status)}


@dataclass
class Session:
    """One invocation's training: where it ran and what it did."""

    device: str
    threads: int
    workers: int
    bf16: bool
    first_step: int

    def describe(self, last_step: int, molecules: int, wall_seconds: float, started: str) -> dict[str, Any]:
        hardware = {"cpu": cpu_model(), "cpu_cores": torch.multiprocessing.cpu_count()}
        if self.device.startswith("cuda"):
            hardware["gpu"] = torch.cuda.get_device_name(torch.device(self.device))
        return {
            "started": started,
            "ended": now(),
            "steps": [self.first_step, last_step],
            "molecules": molecules,
            "wall_seconds": round(wall_seconds, 1),
            "molecules_per_second": round(molecules / wall_seconds, 1) if wall_seconds else None,
            "device": self.device,
            "hardware": hardware,
            "threads": self.threads,
            "workers": self.workers,
            "bf16": self.bf16,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "git": git_commit(),
        }


def new_record(
    recipe: dict[str, Any], model_config: dict[str, Any], parameters: int, data: dict[str, Any]
) -> dict[str, Any]:
    return {
        "model": "megamolbart",
        "created": now(),
        "recipe": recipe,
        "model_config": model_config,
        "parameters": parameters,
        "data": data,
        "progress": {"steps": 0, "molecules_seen": 0, "epochs": 0.0, "wall_seconds": 0.0},
        "losses": [],
        "sessions": [],
        "evaluations": [],
    }


def add_loss(record: dict[str, Any], point: dict[str, Any]) -> None:
    record["losses"].append(point)
    if len(record["losses"]) > LOSS_POINTS:
        record["losses"] = record["losses"][-1::-2][::-1]


def write_record(record: dict[str, Any], folder: Path) -> None:
    (folder / RECORD_FILE).write_text(json.dumps(record, indent=1) + "\n")
