"""Train the served MegaMolBART on MOSES train, so that its default checkpoint is a model and not random weights.

    python -m bionemo_serving.training.megamolbart --run-dir runs/megamolbart --minutes 60 --threads 2     # a new run
    python -m bionemo_serving.training.megamolbart --run-dir runs/megamolbart --resume --steps 20000       # on from its checkpoint
    python -m bionemo_serving.training.megamolbart --run-dir runs/megamolbart --eval 100 --export DIR      # check it, ship it

A run folder holds `checkpoint.pt` (saved every --checkpoint-minutes and at the end; SIGINT or SIGTERM save and stop)
and `training.json`. The recipe (training/recipe.py) is fixed by the first session; later ones may only change
where and how long they train. `--export DIR` writes the HF MBart folder `python -m bionemo_serving.exporter` takes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bionemo_serving.preprocessing.smiles import SmilesTokenizer
from bionemo_serving.training.batch_stream import BatchStream
from bionemo_serving.training.denoising import IGNORED_LABEL, DenoisingBatch, noise_seed
from bionemo_serving.training.export import ExportTooLarge, export_checkpoint
from bionemo_serving.training.moses_data import TrainingData, training_molecules
from bionemo_serving.training.recipe import MODEL, Recipe, model_config, new_model, optimizer_for
from bionemo_serving.training.reconstruction import SAMPLING_RADIUS, reconstruction_report
from bionemo_serving.training.record import Session, add_loss, new_record, now, write_record
from bionemo_serving.training.run_state import Progress, has_run, load_run, save_run

RECIPE_FLAG_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "int | None": int}
"""Recipe fields become flags (batch_size: --batch-size) of these types; `shape` is --config, adam_betas two floats."""


@dataclass(frozen=True)
class SessionOptions:
    """How and how long this invocation trains: none of it changes what a step computes, except bf16."""

    device: str
    workers: int
    bf16: bool
    steps: int | None
    minutes: float | None
    checkpoint_minutes: float
    log_every: int


class Run:
    """A run's model, optimiser, progress and record, new or as its checkpoint left them."""

    def __init__(self, folder: Path, recipe: Recipe, data: TrainingData, device: str) -> None:
        self.folder, self.recipe, self.data = folder, recipe, data
        self.tokenizer = SmilesTokenizer(MODEL.max_length)
        self.model = new_model(recipe).to(device)
        self.optimizer = optimizer_for(self.model, recipe)
        self.progress = Progress()
        parameters = sum(parameter.numel() for parameter in self.model.parameters())
        self.record = new_record(recipe.as_json(), model_config(recipe).to_dict(), parameters, data.summary())

    @classmethod
    def resumed(cls, folder: Path, data_for: Callable[[Recipe], TrainingData], device: str) -> Run:
        saved = load_run(folder)
        recipe = Recipe.from_json(saved.record["recipe"])
        data = data_for(recipe)
        if saved.record["data"] != data.summary():
            raise SystemExit(
                f"{folder}: the run trained on {saved.record['data']}; MOSES train now reads {data.summary()}"
            )
        run = cls(folder, recipe, data, device)
        run.model.load_state_dict(saved.model)
        run.optimizer.load_state_dict(saved.optimizer)
        run.progress, run.record = saved.progress, saved.record
        return run

    def save(self) -> None:
        save_run(self.folder, self.model, self.optimizer, self.progress, self.record)
        write_record(self.record, self.folder)

    def train(self, options: SessionOptions) -> None:
        """Train until the run has `options.steps` steps or this session `options.minutes`, saving as it goes."""
        session = Session(options.device, torch.get_num_threads(), options.workers, options.bf16, self.progress.step)
        self.record["sessions"].append({})
        started, started_at = now(), time.monotonic()
        wall_before, molecules_before = self.record["progress"]["wall_seconds"], self.progress.molecules_seen
        deadline = started_at + options.minutes * 60 if options.minutes is not None else float("inf")
        next_save = started_at + options.checkpoint_minutes * 60

        def note_session() -> None:
            wall = time.monotonic() - started_at
            molecules = self.progress.molecules_seen - molecules_before
            self.record["sessions"][-1] = session.describe(self.progress.step, molecules, wall, started)
            self.record["progress"] = {
                "steps": self.progress.step,
                "molecules_seen": self.progress.molecules_seen,
                "epochs": round(self.progress.molecules_seen / len(self.data.training), 4),
                "wall_seconds": round(wall_before + wall, 1),
            }

        stream = BatchStream(
            self.data, self.recipe, self.tokenizer, self.progress.epoch, self.progress.position, options.workers
        )
        self.model.train()
        try:
            with stop_requests() as stop:
                while not stop.requested and time.monotonic() < deadline:
                    if options.steps is not None and self.progress.step >= options.steps:
                        break
                    placed = next(stream)
                    torch.manual_seed(noise_seed(self.recipe.seed, placed.epoch, placed.position))
                    loss = self._step(placed.batch, options)
                    self.progress.advance(placed.epoch, placed.position, placed.epoch_length, placed.batch.size, loss)
                    if self.progress.step % options.log_every == 0:
                        self._log_loss(wall_before + time.monotonic() - started_at, molecules_before, started_at)
                    if time.monotonic() >= next_save:
                        note_session()
                        self.save()
                        next_save = time.monotonic() + options.checkpoint_minutes * 60
        finally:
            stream.close()
        note_session()
        self.save()
        last = self.record["sessions"][-1]
        print(
            f"step {self.progress.step}: {last['molecules']:,} molecules in {last['wall_seconds']} s this session,"
            f" {last['molecules_per_second']} molecules/s; saved in {self.folder}",
            flush=True,
        )

    def _step(self, batch: DenoisingBatch, options: SessionOptions) -> float:
        device = self.model.device
        encoder_ids, encoder_mask, decoder_ids, labels = (
            torch.from_numpy(array).to(device, non_blocking=True)
            for array in (batch.encoder_ids, batch.encoder_mask, batch.decoder_ids, batch.labels)
        )
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if options.bf16 else nullcontext()
        with autocast:
            latents = self.model.get_encoder()(input_ids=encoder_ids, attention_mask=encoder_mask).last_hidden_state
            # Each molecule's own noise level, U(0, sigma_max): the decoder learns every radius /generate may ask.
            std = torch.rand(len(latents), 1, 1, device=device) * self.recipe.latent_noise
            if self.recipe.clean_share > 0.0:
                std = std * (torch.rand(len(latents), 1, 1, device=device) >= self.recipe.clean_share)
            latents = latents + torch.randn_like(latents) * std
            logits = self.model(
                encoder_outputs=(latents,), attention_mask=encoder_mask, decoder_input_ids=decoder_ids
            ).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORED_LABEL)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe.grad_clip)
        for group in self.optimizer.param_groups:
            group["lr"] = self.recipe.learning_rate_at(self.progress.step)
        self.optimizer.step()
        return loss.item()

    def _log_loss(self, wall_seconds: float, molecules_before: int, started_at: float) -> None:
        point = {
            "step": self.progress.step,
            "loss": round(self.progress.take_mean_loss(), 4),
            "learning_rate": self.recipe.learning_rate_at(self.progress.step - 1),
            "molecules_seen": self.progress.molecules_seen,
            "wall_seconds": round(wall_seconds, 1),
        }
        add_loss(self.record, point)
        rate = (self.progress.molecules_seen - molecules_before) / (time.monotonic() - started_at)
        print(
            f"step {point['step']}  loss {point['loss']:.4f}  lr {point['learning_rate']:.2e}  {rate:.1f} molecules/s",
            flush=True,
        )

    def evaluate(self, count: int) -> dict[str, Any]:
        """Reconstruction of the first `count` molecules set aside from train; recorded and saved with the run."""
        if count > len(self.data.holdout):
            raise SystemExit(f"--eval {count}: the run set aside {len(self.data.holdout)} molecules (--holdout)")
        report = {"step": self.progress.step, "date": now()} | reconstruction_report(
            self.model,
            self.data.holdout_smiles[:count],
            self.tokenizer,
            SAMPLING_RADIUS,
            self.recipe.max_tokens + 1,
        )
        self.record["evaluations"].append(report)
        self.save()
        return report


@contextmanager
def stop_requests() -> Iterator[Any]:
    """SIGINT and SIGTERM ask the loop to stop after its step (and save), instead of killing it mid-way."""
    stop = argparse.Namespace(requested=False)

    def request(signum: int, frame: Any) -> None:
        print(f"signal {signum}: saving and stopping after this step", flush=True)
        stop.requested = True

    previous = {number: signal.signal(number, request) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bionemo_serving.training.megamolbart",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--run-dir", type=Path, required=True, help="the run's folder (checkpoint.pt, training.json)")
    parser.add_argument("--resume", action="store_true", help="train on from the run folder's checkpoint")
    parser.add_argument("--steps", type=int, help="train until the run has this many steps (in all sessions)")
    parser.add_argument("--minutes", type=float, help="train at most this long in this session")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's choice, one per core)")
    parser.add_argument("--workers", type=int, help="processes making batches ahead (default 0 on cpu, 4 on cuda)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (cuda only)")
    parser.add_argument("--checkpoint-minutes", type=float, default=5.0, help="save this often (default 5)")
    parser.add_argument("--log-every", type=int, default=100, help="record the mean loss every N steps (default 100)")
    parser.add_argument(
        "--eval", type=int, metavar="N", help="reconstruct N molecules set aside from train, after training"
    )
    parser.add_argument("--export", type=Path, metavar="DIR", help="write the checkpoint folder the exporter takes")
    recipe = parser.add_argument_group(
        "recipe (a new run only; defaults and reasons in bionemo_serving/training/recipe.py)"
    )
    recipe.add_argument("--config", help="the model shape: JSON, or a JSON file, over the catalog's default shape")
    for field in dataclasses.fields(Recipe):
        if field.name == "adam_betas":
            recipe.add_argument(_flag(field.name), type=float, nargs=2, help=f"default {Recipe.adam_betas}")
        elif field.name != "shape":
            default = field.default
            recipe.add_argument(_flag(field.name), type=RECIPE_FLAG_TYPES[str(field.type)], help=f"default {default}")
    arguments = parser.parse_args(argv)
    if arguments.bf16 and not arguments.device.startswith("cuda"):
        parser.error("--bf16 needs --device cuda")
    return arguments


def recipe_changes(arguments: argparse.Namespace) -> dict[str, Any]:
    """The recipe fields the command line sets."""
    changes = {
        field.name: getattr(arguments, field.name)
        for field in dataclasses.fields(Recipe)
        if field.name != "shape" and getattr(arguments, field.name) is not None
    }
    if arguments.config is not None:
        text = Path(arguments.config).read_text() if Path(arguments.config).is_file() else arguments.config
        changes["shape"] = {**MODEL.default_checkpoint_config, **json.loads(text)}
    if "adam_betas" in changes:
        changes["adam_betas"] = tuple(changes["adam_betas"])
    return changes


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    if arguments.threads is not None:
        torch.set_num_threads(arguments.threads)
    folder: Path = arguments.run_dir
    training = arguments.steps is not None or arguments.minutes is not None
    changes = recipe_changes(arguments)
    tokenizer = SmilesTokenizer(MODEL.max_length)

    def data_for(recipe: Recipe) -> TrainingData:
        return training_molecules(tokenizer, recipe.max_tokens, recipe.holdout, recipe.train_limit)

    if has_run(folder):
        if training and not arguments.resume:
            raise SystemExit(f"{folder} holds a run: --resume to train it on, or another --run-dir")
        if changes:
            raise SystemExit(f"{folder}: its recipe is fixed; drop {', '.join(map(_flag, changes))}")
        run = Run.resumed(folder, data_for, arguments.device)
    elif arguments.resume or not training:
        raise SystemExit(f"{folder}: no run to resume, evaluate or export (start one with --steps or --minutes)")
    else:
        try:
            recipe = Recipe(**changes)
        except ValueError as error:
            raise SystemExit(f"recipe: {error}") from error
        run = Run(folder, recipe, data_for(recipe), arguments.device)
    if training:
        workers = (
            arguments.workers if arguments.workers is not None else (4 if arguments.device.startswith("cuda") else 0)
        )
        options = SessionOptions(
            arguments.device, workers, arguments.bf16, arguments.steps, arguments.minutes,
            arguments.checkpoint_minutes, arguments.log_every,
        )  # fmt: skip
        run.train(options)
    if arguments.eval:
        report = run.evaluate(arguments.eval)
        print(
            f"step {report['step']}: {report['reconstructed']}/{report['molecules']} held-out train molecules"
            f" reconstructed exactly, {report['valid']} valid; with noise {json.dumps(report['noised'])}",
            flush=True,
        )
    if arguments.export:
        try:
            size = export_checkpoint(run.model, run.record, arguments.export)
        except ExportTooLarge as error:
            print(error, file=sys.stderr)
            return 1
        print(f"exported {arguments.export}: {size / 1e6:.1f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
