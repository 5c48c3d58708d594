"""A run's resumable state in its run folder: weights, optimiser, where in the data it stands, and its record.

One `checkpoint.pt` that `torch.load(weights_only=True)` reads (tensors, numbers, strings: no pickled objects).
No RNG state is kept because none is needed: every random draw of step N comes from seeds derived from the recipe's
seed and the batch's place (`denoising.batch_seed`, `noise_seed`), and the learning rate from N, so the step, the
epoch and the position in it are the whole state of the randomness.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FILE = "checkpoint.pt"


@dataclass
class Progress:
    """Where the run stands: `position` batches of `epoch` are done."""

    step: int = 0
    epoch: int = 0
    position: int = 0
    molecules_seen: int = 0
    loss_sum: float = 0.0
    loss_steps: int = 0
    """The training loss since the last recorded loss point (it spans saves, so a resumed run records the same)."""

    def advance(self, epoch: int, position: int, epoch_length: int, molecules: int, loss: float) -> None:
        """Count the step that trained on batch `position` of `epoch`."""
        self.step += 1
        self.epoch, self.position = (epoch, position + 1) if position + 1 < epoch_length else (epoch + 1, 0)
        self.molecules_seen += molecules
        self.loss_sum += loss
        self.loss_steps += 1

    def take_mean_loss(self) -> float:
        mean = self.loss_sum / self.loss_steps
        self.loss_sum, self.loss_steps = 0.0, 0
        return mean


@dataclass(frozen=True)
class SavedRun:
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    progress: Progress
    record: dict[str, Any]
    """training.json's content, the recipe included."""


def save_run(
    folder: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    progress: Progress,
    record: dict[str, Any],
) -> None:
    """Write the checkpoint whole or not at all (a temporary file, then renamed over the previous one)."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "progress": asdict(progress),
        "record": json.dumps(record),
    }
    temporary = folder / f"{CHECKPOINT_FILE}.partial"
    torch.save(state, temporary)
    os.replace(temporary, folder / CHECKPOINT_FILE)


def has_run(folder: Path) -> bool:
    return (folder / CHECKPOINT_FILE).is_file()


def load_run(folder: Path) -> SavedRun:
    state = torch.load(folder / CHECKPOINT_FILE, map_location="cpu", weights_only=True)
    return SavedRun(state["model"], state["optimizer"], Progress(**state["progress"]), json.loads(state["record"]))
