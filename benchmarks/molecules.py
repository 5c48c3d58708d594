"""`make bench`'s molecule benchmark (issue 47): the served megamolbart on MOSES's held-out scaffolds.

MOSES test_scaffolds holds molecules whose Bemis-Murcko scaffolds no train molecule has.

    python -m benchmarks.molecules [--repository model_repository] [--reconstruct 500] [--seeds 200] [--samples 10]
                                   [--batch 32] [--json benchmarks/results/molecules.json]
    python -m benchmarks.molecules --render benchmarks/results/molecules.json [--doc docs/molecules.md]

Starts the service serving megamolbart alone from --repository on a free loopback port (benchmarks.overload's
service), takes a fixed selection of test_scaffolds (the molecules the tokenizer takes, in SELECTION_SEED's
permutation: its first --reconstruct, and its first --seeds as seeds) and, through the native HTTP API:
1. exact reconstruction: /hidden then /decode (greedy) of each molecule, its RDKit-canonical SMILES against the
   molecule's own;
2. sampling: /generate of --samples molecules per seed, greedy, at the service's default scaled_radius (not sent);
3. MOSES's metrics of those samples: validity, uniqueness, novelty against MOSES train, FCD against test and
   test_scaffolds (ChemNet, MOSES's precomputed statistics), beside the FCD of as many molecules of each split itself
   (the floor at that count: FCD is biased upward on few molecules) and MOSES's published baselines.
Writes every molecule's result, the machine, the model's /models entry and each phase's molecules/s to the JSON and
prints its markdown. The targets (benchmarks.molecule_metrics.TARGETS) are checked: a miss exits 1, after the JSON is
written. --render writes a JSON's markdown between the markers of --doc, and nothing else.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import molecule_metrics as metrics
from benchmarks import record
from benchmarks.molecule_runs import (
    DEFAULT_DOC,
    HELD_OUT,
    RANDOM_INIT,
    RANDOM_INIT_NOTE,
    ROOT,
    SELECTION_SEED,
    NativeApi,
    figure,
    held_out_order,
    molecule_service,
    run_line,
    tokenizable,
)
from benchmarks.processes import start, stop
from benchmarks.workload import DRUG_SMILES
from bionemo_serving.preprocessing.smiles import canonical_smiles
from bionemo_serving.runtimes.choice import cpu_model
from bionemo_serving.model_catalog import DEFAULT_MOLECULE_MODEL
from bionemo_serving.fronts.native.protocol import GenerateRequest

TEST = "test"
FLOOR_SEED = 4_700
"""The draw of each split's own molecules whose FCD is the floor at the sampled count."""
GENERATE_SEED = 0
"""/generate's `seed` of the first request (the next ones count up): the same noise at every run."""
DEFAULT_SCALED_RADIUS = GenerateRequest.model_fields["scaled_radius"].default
"""The service's default noise, recorded: the requests leave it out, so that what is measured is the default."""
BEGIN, END = "<!-- molecules: begin -->", "<!-- molecules: end -->"


def selection(count: int) -> tuple[list[str], dict[str, int]]:
    """The first `count` of test_scaffolds' molecules in the benchmarks' fixed order, and how many of the split were
    read and left out."""
    order, left_out = held_out_order()
    return order[:count], left_out


def floor_molecules(split: str, count: int) -> list[str]:
    """`count` molecules of `split` itself, drawn with FLOOR_SEED."""
    molecules = tokenizable(split)
    drawn = np.random.default_rng(FLOOR_SEED).choice(len(molecules.smiles), size=count, replace=False)
    return [molecules.smiles[index] for index in drawn]


class Api(NativeApi):
    """/hidden, /decode and /generate as the benchmark calls them."""

    def reconstruct(self, smiles: list[str]) -> tuple[list[str], float, float]:
        """/hidden then /decode of `smiles`: the decoded SMILES and each call's seconds."""
        began = time.monotonic()
        hidden = self.post(
            "/hidden", {"model": DEFAULT_MOLECULE_MODEL, "sequences": smiles, "encoding_format": "base64"}
        )
        hidden_s = time.monotonic() - began
        states = [
            np.frombuffer(base64.b64decode(row), dtype="<f4").reshape(len(mask), hidden["dim"])
            for row, mask in zip(hidden["hiddens"], hidden["mask"])
        ]
        began = time.monotonic()
        body = {"model": DEFAULT_MOLECULE_MODEL, "hiddens": np.stack(states).tolist(), "mask": hidden["mask"]}
        decoded = self.post("/decode", body)
        return decoded["smiles"], hidden_s, time.monotonic() - began

    def generate(self, seeds: list[str], samples: int, seed: int) -> list[dict[str, Any]]:
        """/generate's results: greedy, the default scaled_radius."""
        body = {
            "model": DEFAULT_MOLECULE_MODEL,
            "smiles": seeds,
            "num_samples": samples,
            "method": "greedy",
            "seed": seed,
        }
        return self.post("/generate", body)["results"]


def chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def rate(count: int, seconds: float) -> dict[str, float | None]:
    per_s = round(count / seconds, 2) if seconds else None
    return {"molecules": count, "seconds": round(seconds, 2), "molecules_per_s": per_s}


def measure_reconstruction(api: Api, smiles: list[str], batch: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each molecule's round trip through its latent, and the molecules/s of /hidden and of /decode."""
    rows, hidden_s, decode_s = [], 0.0, 0.0
    for part in chunks(smiles, batch):
        decoded, hidden_took, decode_took = api.reconstruct(part)
        hidden_s, decode_s = hidden_s + hidden_took, decode_s + decode_took
        for molecule, back in zip(part, decoded, strict=True):
            canonical = canonical_smiles(back)
            rows.append({
                "seed": molecule, "seed_canonical": canonical_smiles(molecule), "decoded": back,
                "valid": canonical is not None, "canonical": canonical,
            })  # fmt: skip
    return rows, {"/hidden": rate(len(smiles), hidden_s), "/decode": rate(len(smiles), decode_s)}


def measure_sampling(
    api: Api, seeds: list[str], samples: int, batch: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`samples` molecules around each seed, `batch` decoded rows a request, and the molecules/s of /generate."""
    rows, seconds = [], 0.0
    for number, part in enumerate(chunks(seeds, max(1, batch // samples))):
        began = time.monotonic()
        results = api.generate(part, samples, GENERATE_SEED + number)
        seconds += time.monotonic() - began
        for molecule, result in zip(part, results, strict=True):
            sampled = []
            for sample in result["samples"]:
                canonical = canonical_smiles(sample["smiles"])
                sampled.append({
                    "smiles": sample["smiles"], "valid": canonical is not None, "canonical": canonical,
                    "tanimoto": sample["tanimoto"],
                })  # fmt: skip
            rows.append({"seed": molecule, "seed_canonical": canonical_smiles(molecule), "samples": sampled})
    return rows, {"/generate": rate(len(seeds) * samples, seconds)}


def sampling_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The sampling targets' figures and what explains them."""
    groups = [[sample["canonical"] for sample in row["samples"]] for row in rows]
    every = [canonical for group in groups for canonical in group]
    seeds = [row["seed_canonical"] for row in rows]
    similarities = [sample["tanimoto"] for row in rows for sample in row["samples"] if sample["tanimoto"] is not None]
    return {
        "valid samples": metrics.fraction_valid(every),
        "samples different from their seed": metrics.fraction_different(seeds, groups),
        "unique valid samples": metrics.fraction_unique(every),
        "mean unique per seed": metrics.mean_unique_per_seed(groups),
        "mean tanimoto to seed": float(np.mean(similarities)) if similarities else None,
    }


def moses_figures(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """MOSES's metrics of every sample (valid, unique, novelty; FCD/Test and FCD/TestSF of the valid ones, duplicates
    kept, as MOSES's `get_all_metrics` computes them), the FCD floor at the same count, and the seconds FCD took."""
    every = [sample["canonical"] for row in rows for sample in row["samples"]]
    valid = [canonical for canonical in every if canonical is not None]
    figures: dict[str, Any] = {
        "molecules": len(every), "valid molecules": len(valid), "valid": metrics.fraction_valid(every),
        f"unique@{len(valid)}": metrics.fraction_unique(every),
        "novelty": metrics.novelty(every, metrics.moses_train()),
    }  # fmt: skip
    if len(valid) < 2:
        return figures, {}  # no FCD of fewer than 2 molecules
    began = time.monotonic()
    generated = metrics.fcd_statistics(valid)
    floor: dict[str, Any] = {"molecules": len(valid)}
    for split, name in ((TEST, "FCD/Test"), (HELD_OUT, "FCD/TestSF")):
        reference = metrics.moses_fcd_statistics(split)
        figures[name] = metrics.fcd(reference, generated)
        floor[name] = metrics.fcd(reference, metrics.fcd_statistics(floor_molecules(split, len(valid))))
    figures["floor"] = floor
    return figures, {"FCD here: ChemNet on 3 sets, 4 distances": rate(3 * len(valid), time.monotonic() - began)}


def warm_up(api: Api) -> None:
    """One call of each endpoint before any is timed."""
    api.reconstruct(list(DRUG_SMILES[:2]))
    api.generate(list(DRUG_SMILES[:2]), 2, GENERATE_SEED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--reconstruct", type=int, default=500, help="test_scaffolds molecules reconstructed")
    parser.add_argument("--seeds", type=int, default=200, help="test_scaffolds molecules sampled around")
    parser.add_argument("--samples", type=int, default=10, help="molecules /generate samples per seed")
    parser.add_argument("--batch", type=int, default=32, help="SMILES a /hidden and /decode request, rows a /generate")
    parser.add_argument("--json", type=Path, help="the raw results (default: benchmarks/results/molecules.json)")
    parser.add_argument("--render", type=Path, help="write this JSON's markdown into --doc, and nothing else")
    parser.add_argument("--doc", type=Path, default=DEFAULT_DOC, help="the markdown file --render writes into")
    args = parser.parse_args(argv)
    if args.render:
        return record.render_into_doc(args.render, args.doc, render)
    measured_at = record.commit()  # the code that runs, whatever is committed meanwhile
    chosen, left_out = selection(max(args.reconstruct, args.seeds))
    running = start(molecule_service(args.repository.resolve()), timeout=1800)
    try:
        api = Api(running.url)
        served = api.models()
        batch = min(args.batch, served["limits"]["max_sequences"])
        print(f"# molecules, megamolbart ({served['model']['weights']}), {cpu_model()}", flush=True)
        warm_up(api)
        reconstruction, timing = measure_reconstruction(api, chosen[: args.reconstruct], batch)
        print(f"  reconstruction: /hidden {timing['/hidden']}, /decode {timing['/decode']}", flush=True)
        sampling, generate_timing = measure_sampling(api, chosen[: args.seeds], args.samples, batch)
        print(f"  sampling: /generate {generate_timing['/generate']}", flush=True)
    finally:
        stop(running)
    moses, fcd_timing = moses_figures(sampling)
    seeds, decoded = ([row[key] for row in reconstruction] for key in ("seed_canonical", "canonical"))
    figures = {"exact reconstruction": metrics.fraction_exact(seeds, decoded), **sampling_figures(sampling)}
    targets = metrics.checked(figures)
    run = {
        **record.header("molecules", argv if argv is not None else sys.argv[1:], measured_at), "served": served,
        "repository": str(args.repository),
        "selection": {
            "split": HELD_OUT, "seed": SELECTION_SEED, "reconstructed": args.reconstruct, "seeds": args.seeds,
            **left_out,
        },
        "sampling": {
            "samples_per_seed": args.samples, "method": "greedy", "scaled_radius": DEFAULT_SCALED_RADIUS,
            "scaled_radius_sent": False, "first_request_seed": GENERATE_SEED, "batch": batch,
        },
        "figures": figures, "moses": moses, "moses_baselines": metrics.MOSES_BASELINES,
        "timing": {**timing, **generate_timing, **fcd_timing}, "targets": targets,
        "reconstruction": reconstruction, "samples": sampling,
    }  # fmt: skip
    destination = args.json or record.RESULTS / "molecules.json"
    record.write(run, destination)
    print(render(run))
    print(f"wrote {destination}")
    return record.exit_status(run["targets"])


def render(record: dict[str, Any]) -> str:
    """The run's markdown: what was measured on what, the targets, each phase's rate, MOSES's metrics beside its
    baselines; between the markers --doc holds (`python -m benchmarks.molecules --render FILE`)."""
    model, selected, sampling = record["served"]["model"], record["selection"], record["sampling"]
    moses, figures = record["moses"], record["figures"]
    valid_count = moses["valid molecules"]
    floor = moses.get("floor", {})
    lines = [
        BEGIN,
        run_line(record),
        "",
        f"MOSES {selected['split']}: {selected['reconstructed']} molecules reconstructed and {selected['seeds']} seeds "
        f"sampled around, the first of the split's permutation by seed {selected['seed']} ({selected['read']:,} read, "
        f"{selected['unknown_tokens']} left out for a token outside the vocabulary). /generate: "
        f"{sampling['samples_per_seed']} samples a seed, {sampling['method']}, scaled_radius "
        f"{sampling['scaled_radius']} (the service's default, not sent), {sampling['batch']} rows a request.",
        *(["", RANDOM_INIT_NOTE] if model["weights"] == RANDOM_INIT else []),
        "",
        "| target | value | wanted | |",
        "|---|---:|---|---|",
        *(
            f"| {name} | {figure(target['value'])} | {target['target']} | {'met' if target['met'] else '**missed**'} |"
            for name, target in record["targets"].items()
        ),
        f"| mean unique per seed (not a target) | {figure(figures['mean unique per seed'])} | | |",
        f"| mean Tanimoto of a sample to its seed (not a target) | {figure(figures['mean tanimoto to seed'])} | | |",
        "",
        "| phase | molecules | seconds | molecules/s |",
        "|---|---:|---:|---:|",
        *(
            f"| {phase} | {timed['molecules']} | {timed['seconds']:g} | {figure(timed['molecules_per_s'], 2)} |"
            for phase, timed in record["timing"].items()
        ),
        "",
        f"MOSES's metrics of the {moses['molecules']} samples ({valid_count} valid), beside its published baselines "
        "and the FCD of as many molecules of MOSES's test and test_scaffolds themselves (the floor at that count):",
        "",
        "| model | molecules | valid | unique | FCD/Test | FCD/TestSF | novelty |",
        "|---|---|---:|---:|---:|---:|---:|",
        f"| megamolbart v{model['version']}, served | {moses['molecules']} around {selected['seeds']} held-out seeds | "
        f"{figure(moses['valid'])} | {figure(moses[f'unique@{valid_count}'])} (@{valid_count}) | "
        f"{figure(moses.get('FCD/Test'))} | {figure(moses.get('FCD/TestSF'))} | {figure(moses['novelty'])} |",
        f"| floor: the splits' own molecules | {floor.get('molecules', '–')} drawn from test, test_scaffolds | | | "
        f"{figure(floor.get('FCD/Test'))} | {figure(floor.get('FCD/TestSF'))} | |",
        *(
            f"| {name} (MOSES) | {baseline['sampled']} | {baseline['valid']:.3f} | {baseline['unique@10k']:.3f} (@10k) "
            f"| {baseline['FCD/Test']:.3f} | {baseline['FCD/TestSF']:.3f} | {baseline['novelty']:.3f} |"
            for name, baseline in record["moses_baselines"].items()
        ),
        "",
        "Not like for like: MOSES's baselines sample 30,000 molecules from each model's prior; ours are "
        f"{sampling['samples_per_seed']} samples around each of {selected['seeds']} held-out seeds, near "
        "test_scaffolds' molecules by construction (which should lower FCD/TestSF below what sampling a prior gives). "
        f"FCD is biased upward on few molecules (here {valid_count} valid): read ours against the floor's row, "
        "computed on as many, not against the baselines' 30,000.",
        END,
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
