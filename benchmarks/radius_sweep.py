"""How trained megamolbart runs reconstruct and sample at several radii: the figures that choose a recipe's latent scale.

    python -m benchmarks.radius_sweep RUN_DIR [RUN_DIR ...] --json FILE [--device cuda]

Each run (training.megamolbart's --run-dir) is measured on the train molecules it set aside (never a test split): exact
reconstruction of the first `--reconstruct`, then `--samples` greedy decodings around each of the next `--seeds` at
each radius, with the molecule benchmark's figures (molecule_metrics; benchmarks/molecules.py measures the served
default on test_scaffolds): valid, different from the seed, unique over the valid ones, and the mean Tanimoto of the
different ones to their seed. benchmarks/results/megamolbart-recipe-search.json holds the sweep that chose the shipped
recipe.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import molecule_metrics as metrics
from bionemo_serving.preprocessing.smiles import SmilesTokenizer, canonical_smiles, tanimoto_similarity
from bionemo_serving.training import reconstruction
from bionemo_serving.training.megamolbart import Run
from bionemo_serving.training.moses_data import TrainingData, training_molecules
from bionemo_serving.training.recipe import MODEL, Recipe
from bionemo_serving.training.record import cpu_model, now

RADII = (0.5, 0.75, 1.0, 1.25, 1.5)
MAX_NEW_TOKENS = 129
BATCH_SIZE = 1000
"""Molecules a decoding call: the sweep is sized for a GPU."""


def sampled_figures(seeds: list[str | None], groups: list[list[str | None]]) -> dict[str, float | None]:
    """The benchmark's sampling figures of each seed's canonical samples, and the Tanimoto of the different ones."""
    every = [sample for group in groups for sample in group]
    similarities = [
        tanimoto_similarity(seed, sample) or 0.0
        for seed, group in zip(seeds, groups, strict=True)
        for sample in group
        if sample is not None and sample != seed
    ]
    return {
        "valid": metrics.fraction_valid(every),
        "different": metrics.fraction_different(seeds, groups),
        "unique": metrics.fraction_unique(every),
        "tanimoto_different": sum(similarities) / len(similarities) if similarities else None,
    }


def sweep(run: Run, reconstruct: int, seeds: int, samples: int, radii: tuple[float, ...]) -> dict[str, Any]:
    """`run` measured on its set-aside molecules: reconstruction, then sampling at each of `radii`."""
    held = run.data.holdout_smiles
    if reconstruct + seeds > len(held):
        raise SystemExit(f"{run.folder}: {reconstruct} + {seeds} molecules asked, {len(held)} set aside (--holdout)")
    model, tokenizer = run.model.eval(), run.tokenizer
    started = time.monotonic()
    originals = held[:reconstruct]
    greedy = reconstruction.decode(model, originals, tokenizer, 0.0, MAX_NEW_TOKENS, batch_size=BATCH_SIZE)
    exact = metrics.fraction_exact([canonical_smiles(m) for m in originals], [canonical_smiles(m) for m in greedy])
    seed_molecules = held[reconstruct : reconstruct + seeds]
    repeated = [molecule for molecule in seed_molecules for _ in range(samples)]
    by_radius = {}
    for radius in radii:
        decoded = reconstruction.decode(
            model, repeated, tokenizer, radius, MAX_NEW_TOKENS, seed=1, batch_size=BATCH_SIZE
        )
        canonical = [canonical_smiles(molecule) for molecule in decoded]
        groups = [canonical[start : start + samples] for start in range(0, len(canonical), samples)]
        by_radius[str(radius)] = sampled_figures([canonical_smiles(m) for m in seed_molecules], groups)
    recipe = run.recipe.as_json()
    return {
        "recipe": {name: recipe[name] for name in ("latent_scale", "latent_noise", "clean_share", "batch_size")},
        "progress": run.record["progress"],
        "reconstructed": exact,
        "radii": by_radius,
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.radius_sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (training.megamolbart's --run-dir)")
    parser.add_argument("--json", type=Path, required=True, help="where the figures go")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reconstruct", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--radii", type=float, nargs="+", default=RADII)
    arguments = parser.parse_args(argv)
    data: dict[tuple[int, int, int | None], TrainingData] = {}
    tokenizer = SmilesTokenizer(MODEL.max_length)

    def data_for(recipe: Recipe) -> TrainingData:
        key = (recipe.max_tokens, recipe.holdout, recipe.train_limit)
        if key not in data:
            data[key] = training_molecules(tokenizer, *key)
        return data[key]

    figures = {
        "date": now(),
        "command": " ".join(["python -m benchmarks.radius_sweep", *(argv or sys.argv[1:])]),
        "cpu": cpu_model(),
        "device": arguments.device,
        "runs": {},
    }
    for folder in arguments.runs:
        run = Run.resumed(folder, data_for, arguments.device)
        figures["runs"][folder.name] = sweep(
            run, arguments.reconstruct, arguments.seeds, arguments.samples, tuple(arguments.radii)
        )
        print(folder.name, json.dumps(figures["runs"][folder.name]), flush=True)
        arguments.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
