"""Command line: `python -m bionemo_serving.exporter export MODEL --checkpoint PATH` and `python -m bionemo_serving.exporter defaults`."""

from __future__ import annotations

import argparse
import enum
import os
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # checkpoints are local folders; never reach for a hub

import transformers  # noqa: E402

from bionemo_serving.exporter.architectures import copy_trained_default, create_default_checkpoint  # noqa: E402
from bionemo_serving.exporter.errors import ExportError  # noqa: E402
from bionemo_serving.exporter.pipeline import Optimizer, export_model  # noqa: E402
from bionemo_serving.exporter.progress import PrintedProgress  # noqa: E402
from bionemo_serving.exporter.runtime_export import CONVERTERS  # noqa: E402
from bionemo_serving.exporter.triton_config import recorded_checkpoint  # noqa: E402
from bionemo_serving.model_catalog import MODELS, RANDOM_INIT_WEIGHTS, ModelDescription, Precision, Target  # noqa: E402
from bionemo_serving.runtimes.engines import Runtime  # noqa: E402

DEFAULT_CHECKPOINTS = Path("checkpoints")
DEFAULT_REPOSITORY = Path("model_repository")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text}")
    return value


def _choice(parser: argparse.ArgumentParser, flag: str, default: enum.Enum, help: str) -> None:
    """An option taking one value of `default`'s enum, listed by value."""
    kind = type(default)
    metavar = "{" + ",".join(member.value for member in kind) + "}"
    parser.add_argument(flag, type=kind, choices=list(kind), default=default, metavar=metavar, help=help)


EXPORTED_PRECISIONS = (Precision.FP32, Precision.INT8)


def _precision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--precision", type=lambda text: Precision(text.upper()), choices=EXPORTED_PRECISIONS, default=Precision.FP32,
        metavar="{fp32,int8}",
        help="int8: the encoder and language-model graphs in INT8 where they pass the accuracy gate, else FP32 "
        "(bionemo_serving/exporter/quantize.py)",
    )  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bionemo_serving.exporter", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    export = commands.add_parser("export", help="export one checkpoint into the model repository")
    export.add_argument("model", choices=sorted(MODELS))
    export.add_argument(
        "--checkpoint", type=Path, required=True, help="HuggingFace checkpoint folder or BioNeMo .nemo file"
    )
    export.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    export.add_argument("--version", type=_positive, default=1)
    _choice(export, "--target", Target.CPU, "where the parity gate (and Navigator) runs; every target's config is written")
    export.add_argument("--max-batch-size", type=_positive, help="Triton's max_batch_size (default: the catalog's)")
    _choice(export, "--optimizer", Optimizer.BUILTIN, "builtin: torch.onnx; navigator: Triton Model Navigator (optional)")
    export.add_argument("--tolerance", type=float, help="parity gate, max abs diff (default: per target precision)")
    export.add_argument(
        "--versions-served", type=_positive, help="Triton serves the newest N versions side by side (default: 1)"
    )
    export.add_argument("--response-cache", action="store_true", help="enable Triton's response cache for the model")
    _precision(export)
    export.add_argument(
        "--runtimes", nargs="*", type=Runtime, choices=list(CONVERTERS), default=list(CONVERTERS),
        metavar="{" + ",".join(runtime.value for runtime in CONVERTERS) + "}",
        help="the runtimes written beside the ONNX file, each timed and gated (default: all; none: ONNX only)",
    )  # fmt: skip

    defaults = commands.add_parser(
        "defaults", help="create the small random-init checkpoints (if missing) and export them (if missing)"
    )
    defaults.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    defaults.add_argument("--checkpoints", type=Path, default=DEFAULT_CHECKPOINTS)
    defaults.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    defaults.add_argument(
        "--force", action="store_true",
        help="export again even where a version exists (never over a version another export wrote)",
    )  # fmt: skip
    _precision(defaults)
    defaults.add_argument(
        "--size", help="a published shape (model_catalog's published_sizes, e.g. 150M, 650M): its random-init "
        "checkpoint is <checkpoints>/<model>-<size>",
    )  # fmt: skip
    return parser


def _described(args: argparse.Namespace) -> ModelDescription:
    """The catalog's description of the model with the command line's serving options applied."""
    description = MODELS[args.model]
    batching = description.batching
    if args.max_batch_size is not None:
        batching = batching.with_max_batch_size(args.max_batch_size)
    return replace(
        description,
        batching=batching,
        versions_served=args.versions_served or description.versions_served,
        response_cache=args.response_cache or description.response_cache,
    )


def _written_by_others(description: ModelDescription, repository: Path) -> str:
    """Which of the model's version-1 folders another export wrote (its config records another checkpoint, or none),
    and from what; empty where `exporter defaults` wrote them all or none exists. The defaults never replace a user's
    own export: a `git pull` makes `make serve` export them again."""
    others = []
    for graph in description.graphs:
        model_dir = repository / description.triton_name(graph.role)
        source = recorded_checkpoint(model_dir, 1) if (model_dir / "1").is_dir() else RANDOM_INIT_WEIGHTS
        if source not in (RANDOM_INIT_WEIGHTS, description.default_weights):
            others.append(f"{model_dir / '1'} (from {source or 'a checkpoint its config does not name'})")
    return f"version 1 was exported from a user's checkpoint: {', '.join(others)}" if others else ""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    transformers.logging.set_verbosity_error()  # e.g. the unused lm_head of an *ForMaskedLM checkpoint
    transformers.logging.disable_progress_bar()
    progress = PrintedProgress()
    try:
        if args.command == "export":
            report = export_model(
                _described(args),
                args.checkpoint,
                args.repository,
                version=args.version,
                target=args.target,
                optimizer=args.optimizer,
                runtimes=args.runtimes,
                tolerance=args.tolerance,
                progress=progress,
                precision=args.precision,
            )
            print(report.summary())
            return 0
        if args.size and (unsized := [name for name in args.models if args.size not in MODELS[name].published_sizes]):
            raise ExportError(f"--size {args.size}: no published size of {', '.join(unsized)} has that name")
        for name in args.models:
            description = MODELS[name].at_size(args.size) if args.size else MODELS[name]
            checkpoint = args.checkpoints / (f"{name}-{args.size}" if args.size else name)
            if description.trained_default is not None:
                if copy_trained_default(description.trained_default, checkpoint):
                    print(f"{name}: copied the weights trained here, {description.trained_default.folder}, to {checkpoint}")
            elif not (checkpoint / "config.json").is_file():
                create_default_checkpoint(description, checkpoint)
                print(f"{name}: created random-init checkpoint {checkpoint}")
            versions = [args.repository / description.triton_name(g.role) / "1" for g in description.graphs]
            if others := _written_by_others(description, args.repository):
                print(f"{name}: {others}; not exported over (delete it, or export the defaults elsewhere)")
            elif args.force or not all(version.is_dir() for version in versions):
                report = export_model(
                    description, checkpoint, args.repository, progress=progress, weights=description.default_weights,
                    precision=args.precision,
                )  # fmt: skip
                print(report.summary())
            else:
                print(f"{name}: version 1 exists; skipped (--force exports again)")
        return 0
    except ExportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
