"""Command line: `python -m exporter MODEL --checkpoint DIR` and `python -m exporter defaults`."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # checkpoints are local folders; never reach for a hub

import transformers  # noqa: E402

from exporter.architectures import CheckpointError, create_default_checkpoint  # noqa: E402
from exporter.pipeline import export_model  # noqa: E402
from exporter.verify import DEFAULT_TOLERANCE, ParityError  # noqa: E402
from model_catalog import MODELS  # noqa: E402

DEFAULT_CHECKPOINTS = Path("checkpoints")
DEFAULT_REPOSITORY = Path("model_repository")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m exporter", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    export = commands.add_parser("export", help="export one checkpoint folder into the model repository")
    export.add_argument("model", choices=sorted(MODELS))
    export.add_argument("--checkpoint", type=Path, required=True, help="HuggingFace checkpoint folder")
    export.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    export.add_argument("--version", type=int, default=1)
    export.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="parity gate, max abs diff")
    export.add_argument(
        "--external-data", action="store_true", help="weights in model.onnx.data (automatic over 2 GB)"
    )
    export.add_argument(
        "--versions-served", type=int, help="Triton serves the newest N versions side by side (default: the catalog's)"
    )
    export.add_argument("--response-cache", action="store_true", help="enable Triton's response cache for the model")

    defaults = commands.add_parser(
        "defaults", help="create the small random-init checkpoints (if missing) and export them (if missing)"
    )
    defaults.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    defaults.add_argument("--checkpoints", type=Path, default=DEFAULT_CHECKPOINTS)
    defaults.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    defaults.add_argument("--force", action="store_true", help="export again even where a version exists")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    transformers.logging.set_verbosity_error()  # e.g. the unused lm_head of an *ForMaskedLM checkpoint
    transformers.logging.disable_progress_bar()
    try:
        if args.command == "export":
            description = replace(
                MODELS[args.model],
                versions_served=args.versions_served or MODELS[args.model].versions_served,
                response_cache=args.response_cache or MODELS[args.model].response_cache,
            )
            report = export_model(
                description, args.checkpoint, args.repository, args.version, args.tolerance, args.external_data
            )
            print(report.summary())
            return 0
        for name in args.models:
            checkpoint = args.checkpoints / name
            if not (checkpoint / "config.json").is_file():
                create_default_checkpoint(MODELS[name], checkpoint)
                print(f"{name}: created random-init checkpoint {checkpoint}")
            description = MODELS[name]
            versions = [args.repository / description.triton_name(g.role) / "1" for g in description.graphs]
            if args.force or not all(version.is_dir() for version in versions):
                print(export_model(description, checkpoint, args.repository).summary())
            else:
                print(f"{name}: version 1 exists; skipped (--force exports again)")
        return 0
    except (CheckpointError, ParityError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
