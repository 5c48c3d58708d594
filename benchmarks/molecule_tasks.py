"""`make bench`'s property-guided tasks (issue 47): the served megamolbart's CMA-ES search on the QED and
penalized-logP tasks of JT-VAE, Jin et al. 2019 and MolMIM, seeded from MOSES test_scaffolds.

    python -m benchmarks.molecule_tasks [--repository model_repository] [--qed-seeds 24] [--plogp-seeds 16]
                                        [--particles 20] [--iterations 10]
                                        [--json benchmarks/results/molecule-tasks.json]
    python -m benchmarks.molecule_tasks --render benchmarks/results/molecule-tasks.json [--doc docs/molecules.md]

Starts the service serving megamolbart alone (benchmarks.molecule_runs), and through its native HTTP API, one request
at a time, each timed:
1. the QED task: seeds are the first --qed-seeds test_scaffolds molecules, in the benchmarks' fixed order, of QED in
   [0.7, 0.8); a seed succeeds where a molecule of QED >= 0.9 at Tanimoto >= 0.4 to it is found. Per seed, CMA-ES of
   --particles x --iterations decodings optimising MolMIM's combined score (/generate's `optimize`, QED-similarity),
   against unguided sampling of as many molecules around the seed (plain /generate, greedy, the default radius);
2. the penalized-logP task: seeds are the first --plogp-seeds, in that order, of the 800 test_scaffolds molecules of
   lowest penalized logP; per seed and per similarity floor (0.4, 0.6), CMA-ES maximising penalized logP under the
   floor, the improvement being the best penalized logP found at the floor minus the seed's (0 where none is better).
The literature's figures are over 800 molecules of ZINC250k (not available here): MOSES test_scaffolds stands in for
it, so that they are shown beside ours, not compared like for like. Writes every seed's result, each request's seconds
on this CPU, the machine and the model to the JSON and prints its markdown; the target (benchmarks.molecule_task_scores
.TARGETS) is checked, a miss exits 1 after the JSON is written. --render writes a JSON's markdown between the markers
of --doc, and nothing else.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import molecule_metrics as metrics
from benchmarks import molecule_task_scores as scores
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
)
from benchmarks.processes import start, stop
from bionemo_serving.preprocessing.properties import penalized_logp, qed
from bionemo_serving.preprocessing.smiles import canonical_smiles
from bionemo_serving.runtimes.choice import cpu_model
from bionemo_serving.model_catalog import DEFAULT_MOLECULE_MODEL
from bionemo_serving.engine.inputs import MolecularProperty
from bionemo_serving.fronts.native.protocol import GenerateRequest

REQUEST_SEED = 470
"""/generate's `seed` of each seed molecule's requests is this plus the seed's index: the same search at every run."""
ANSWERED = 10
"""Molecules a search answers (`num_samples`): the best first, so that a hit or the best improvement leads them."""
MOST_SAMPLES = next(rule.le for rule in GenerateRequest.model_fields["num_samples"].metadata if hasattr(rule, "le"))
"""The most samples /generate answers per seed: the unguided budget is sent as copies of the seed."""
DEFAULT_SCALED_RADIUS = GenerateRequest.model_fields["scaled_radius"].default
"""Not sent: CMA-ES's initial step size and the unguided radius are the service's default."""
QED_SEARCH, PLOGP_SEARCH = "QED: CMA-ES", "plogP: CMA-ES"
UNGUIDED = "QED: unguided sampling"
BEGIN, END = "<!-- molecule tasks: begin -->", "<!-- molecule tasks: end -->"


def qed_seeds(order: list[str], count: int) -> tuple[list[str], int]:
    """The first `count` molecules of `order` of QED in [0.7, 0.8), and how many were read to find them."""
    found, read = [], 0
    for smiles in order:
        if len(found) == count:
            break
        read += 1
        if scores.is_qed_seed(smiles):
            found.append(smiles)
    return found, read


def lowest_plogp(order: list[str], count: int = scores.LOWEST_PLOGP) -> tuple[list[str], float]:
    """The `count` molecules of `order` of lowest penalized logP, in `order`'s order, and the highest of their values.
    Every molecule is scored, by a process per core: test_scaffolds' 176,199 take about two minutes of one core."""
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        values = np.array(list(pool.map(penalized_logp, order, chunksize=2_000)), dtype=np.float64)
    lowest = np.sort(np.argsort(values, kind="stable")[:count])
    return [order[index] for index in lowest], float(values[lowest].max())


class TaskApi(NativeApi):
    """/generate as the tasks call it: with `optimize` for CMA-ES, without for unguided sampling; each call timed."""

    def search(self, seed: str, optimize: dict[str, Any], number: int) -> tuple[dict[str, Any], float]:
        """/generate's search around `seed`: its one result (samples best first, `decoded`) and the seconds it took."""
        body = {
            "model": DEFAULT_MOLECULE_MODEL,
            "smiles": [seed],
            "num_samples": ANSWERED,
            "seed": number,
            "optimize": optimize,
        }
        began = time.monotonic()
        (result,) = self.post("/generate", body)["results"]
        return result, time.monotonic() - began

    def sample(self, seed: str, count: int, number: int) -> tuple[list[str], float]:
        """`count` molecules sampled around `seed` in one request (greedy, the default radius), as copies of the seed
        of at most MOST_SAMPLES samples each, and the seconds it took."""
        copies = math.ceil(count / MOST_SAMPLES)
        body = {
            "model": DEFAULT_MOLECULE_MODEL, "smiles": [seed] * copies, "num_samples": math.ceil(count / copies),
            "method": "greedy", "seed": number,
        }  # fmt: skip
        began = time.monotonic()
        results = self.post("/generate", body)["results"]
        seconds = time.monotonic() - began
        return [sample["smiles"] for result in results for sample in result["samples"]][:count], seconds


def searched(result: dict[str, Any], seconds: float) -> dict[str, Any]:
    """A search's record: its molecules (canonical) with the service's similarity and score, its decodings, its time."""
    molecules = [
        {"smiles": sample["smiles"], "tanimoto": sample["tanimoto"], "score": sample["score"]}
        for sample in result["samples"]
    ]
    return {"molecules": molecules, "decoded": result["decoded"], "seconds": round(seconds, 3)}


def run_qed_task(api: TaskApi, seeds: list[str], particles: int, iterations: int) -> list[dict[str, Any]]:
    """Each seed's CMA-ES on MolMIM's combined score and its unguided sampling of as many molecules, and their hits."""
    search = {
        "property": MolecularProperty.QED_SIMILARITY.value, "min_similarity": 0.0, "particles": particles,
        "iterations": iterations,
    }  # fmt: skip
    rows = []
    for index, seed in enumerate(seeds):
        result, seconds = api.search(seed, search, REQUEST_SEED + index)
        guided = searched(result, seconds)
        guided["hit"] = scores.qed_hit(seed, [molecule["smiles"] for molecule in guided["molecules"]])
        sampled, sampled_s = api.sample(seed, particles * iterations, REQUEST_SEED + index)
        valid = {canonical for canonical in map(canonical_smiles, sampled) if canonical is not None}
        unguided = {
            "samples": len(sampled), "valid": sum(canonical_smiles(smiles) is not None for smiles in sampled),
            "distinct_valid": len(valid), "hit": scores.qed_hit(seed, sorted(valid)), "seconds": round(sampled_s, 3),
        }  # fmt: skip
        rows.append({"seed": seed, "seed_qed": qed(seed), "cma_es": guided, "unguided": unguided})
        print(f"  QED {index + 1}/{len(seeds)}: CMA-ES {seconds:.1f} s, hit {guided['hit']}; "
              f"unguided {sampled_s:.1f} s, hit {unguided['hit']}", flush=True)  # fmt: skip
    return rows


def run_plogp_task(api: TaskApi, seeds: list[str], particles: int, iterations: int) -> list[dict[str, Any]]:
    """Each seed's CMA-ES maximising penalized logP under each similarity floor, and its improvement there."""
    rows = []
    for index, seed in enumerate(seeds):
        row: dict[str, Any] = {"seed": seed, "seed_plogp": penalized_logp(seed)}
        for floor in scores.SIMILARITY_FLOORS:
            search = {
                "property": MolecularProperty.PLOGP.value, "min_similarity": floor, "particles": particles,
                "iterations": iterations,
            }  # fmt: skip
            result, seconds = api.search(seed, search, REQUEST_SEED + index)
            outcome = searched(result, seconds)
            found = scores.plogp_improvement(seed, [molecule["smiles"] for molecule in outcome["molecules"]], floor)
            row[f"similarity >= {floor}"] = {**outcome, "best": found.best, "improvement": found.improvement}
            print(f"  plogP {index + 1}/{len(seeds)} >= {floor}: {seconds:.1f} s, +{found.improvement:.2f}", flush=True)
        rows.append(row)
    return rows


def timing(seconds: list[float]) -> dict[str, Any]:
    """One kind of request's times: how many, the median, the range and the total."""
    if not seconds:
        return {"requests": 0, "median_s": None, "min_s": None, "max_s": None, "total_s": 0.0}
    return {
        "requests": len(seconds), "median_s": round(float(np.median(seconds)), 2), "min_s": round(min(seconds), 2),
        "max_s": round(max(seconds), 2), "total_s": round(sum(seconds), 2),
    }  # fmt: skip


def task_figures(qed_rows: list[dict[str, Any]], plogp_rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The tasks' figures over every seed."""
    figures = {
        "QED task success, CMA-ES": scores.rate([row["cma_es"]["hit"] is not None for row in qed_rows]),
        "QED task success, unguided": scores.rate([row["unguided"]["hit"] is not None for row in qed_rows]),
    }
    for floor in scores.SIMILARITY_FLOORS:
        outcomes = [row[f"similarity >= {floor}"] for row in plogp_rows]
        figures[f"plogP improvement, similarity >= {floor}"] = scores.mean([o["improvement"] for o in outcomes])
        figures[f"plogP success, similarity >= {floor}"] = scores.rate([o["best"] is not None for o in outcomes])
    return figures


def warm_up(api: TaskApi, seed: str) -> None:
    """One small search and one sampling before any request is timed."""
    api.search(seed, {"property": MolecularProperty.QED.value, "particles": 3, "iterations": 1}, REQUEST_SEED)
    api.sample(seed, 2, REQUEST_SEED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--qed-seeds", type=int, default=24, help="QED task seeds (the literature's: 800)")
    parser.add_argument("--plogp-seeds", type=int, default=16, help="penalized-logP task seeds (the literature's: 800)")
    parser.add_argument("--particles", type=int, default=20, help="CMA-ES latents per iteration")
    parser.add_argument("--iterations", type=int, default=10, help="CMA-ES iterations per search")
    parser.add_argument("--json", type=Path, help="the raw results (default: benchmarks/results/molecule-tasks.json)")
    parser.add_argument("--render", type=Path, help="write this JSON's markdown into --doc, and nothing else")
    parser.add_argument("--doc", type=Path, default=DEFAULT_DOC, help="the markdown file --render writes into")
    args = parser.parse_args(argv)
    if args.render:
        return record.render_into_doc(args.render, args.doc, render)
    began = time.monotonic()
    measured_at = record.commit()  # the code that runs, whatever is committed meanwhile
    order, left_out = held_out_order()
    qed_chosen, qed_read = qed_seeds(order, args.qed_seeds)
    lowest, lowest_highest = lowest_plogp(order)
    plogp_chosen = lowest[: args.plogp_seeds]
    selecting_s = time.monotonic() - began
    running = start(molecule_service(args.repository.resolve()), timeout=1800)
    try:
        api = TaskApi(running.url)
        served = api.models()
        starting_s = time.monotonic() - began - selecting_s
        print(f"# molecule tasks, megamolbart ({served['model']['weights']}), {cpu_model()}", flush=True)
        warm_up(api, qed_chosen[0])
        qed_rows = run_qed_task(api, qed_chosen, args.particles, args.iterations)
        plogp_rows = run_plogp_task(api, plogp_chosen, args.particles, args.iterations)
    finally:
        stop(running)
    figures = task_figures(qed_rows, plogp_rows)
    floors = [f"similarity >= {floor}" for floor in scores.SIMILARITY_FLOORS]
    run = {
        **record.header("molecule-tasks", argv if argv is not None else sys.argv[1:], measured_at), "served": served,
        "repository": str(args.repository),
        "selection": {
            "split": HELD_OUT, "seed": SELECTION_SEED, **left_out, "qed_seeds": len(qed_chosen), "qed_read": qed_read,
            "qed_range": scores.QED_SEED_RANGE, "plogp_seeds": len(plogp_chosen), "plogp_lowest": len(lowest),
            "plogp_lowest_highest": lowest_highest,
        },
        "budget": {
            "particles": args.particles, "iterations": args.iterations, "decodings": args.particles * args.iterations,
            "answered": ANSWERED, "scaled_radius": DEFAULT_SCALED_RADIUS, "scaled_radius_sent": False,
            "first_request_seed": REQUEST_SEED,
        },
        "figures": figures, "targets": metrics.checked(figures, scores.TARGETS),
        "published": {"QED": scores.QED_PUBLISHED, "plogP": scores.PLOGP_PUBLISHED},
        "timing": {
            QED_SEARCH: timing([row["cma_es"]["seconds"] for row in qed_rows]),
            UNGUIDED: timing([row["unguided"]["seconds"] for row in qed_rows]),
            PLOGP_SEARCH: timing([row[floor]["seconds"] for row in plogp_rows for floor in floors]),
        },
        "step_seconds": {
            "selecting seeds": round(selecting_s, 1), "starting the service": round(starting_s, 1),
            "whole step": round(time.monotonic() - began, 1),
        },
        "qed_task": qed_rows, "plogp_task": plogp_rows,
    }  # fmt: skip
    destination = args.json or record.RESULTS / "molecule-tasks.json"
    record.write(run, destination)
    print(render(run))
    print(f"wrote {destination}")
    return record.exit_status(run["targets"])


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def render(record: dict[str, Any]) -> str:
    """The run's markdown: what was run on what, each task's figures beside the published ones, the target, each
    request's time; between the markers --doc holds (`python -m benchmarks.molecule_tasks --render FILE`)."""
    selected, budget, figures = record["selection"], record["budget"], record["figures"]
    target = record["targets"]["QED task success, CMA-ES"]
    low, high = selected["qed_range"]
    qed_count, plogp_count = selected["qed_seeds"], selected["plogp_seeds"]
    steps = record["step_seconds"]
    lines = [
        BEGIN,
        run_line(record),
        "",
        f"Seeds from MOSES {selected['split']} in the benchmarks' fixed order (seed {selected['seed']}): for the QED "
        f"task its first {qed_count} molecules of QED in [{low}, {high}) ({selected['qed_read']:,} read to find them); "
        f"for the penalized-logP task the first {plogp_count} of its {selected['plogp_lowest']} molecules of lowest "
        f"penalized logP (at most {selected['plogp_lowest_highest']:.2f}). Each search: {budget['particles']} "
        f"particles x {budget['iterations']} iterations = {budget['decodings']} decodings, CMA-ES from the seed's "
        f"latent at scaled_radius {budget['scaled_radius']} (the service's default, not sent), through /generate's "
        f"`optimize`, its best {budget['answered']} molecules answered; unguided: {budget['decodings']} molecules "
        "sampled around the seed by plain /generate (greedy, the same radius).",
        *(["", RANDOM_INIT_NOTE] if record["served"]["model"]["weights"] == RANDOM_INIT else []),
        "",
        f"QED task: a seed succeeds where a molecule of QED >= 0.9 at Tanimoto >= 0.4 to it is found. Ours over "
        f"{qed_count} seeds; the published figures over 800 (Jin et al. 2019's test set, from ZINC250k).",
        "",
        "| model | seeds | success |",
        "|---|---:|---:|",
        f"| megamolbart, served: CMA-ES on MolMIM's QED-similarity score | {qed_count} | "
        f"{_percent(figures['QED task success, CMA-ES'])} |",
        f"| megamolbart, served: unguided sampling, the same budget | {qed_count} | "
        f"{_percent(figures['QED task success, unguided'])} |",
        *(f"| {name} (published) | 800 | {_percent(value)} |" for name, value in record["published"]["QED"].items()),
        "",
        f"Target: CMA-ES's success >= {_percent(scores.QED_TARGET)} (VSeq2Seq's): "
        f"{'met' if target['met'] else '**missed**'}; goal >= {_percent(scores.QED_GOAL_RATE)} (VJTNN+GAN's).",
        "",
        f"Penalized-logP task: per seed and similarity floor, the best penalized logP found at the floor minus the "
        f"seed's (0 where none is better), averaged; success: a better one found. Ours over {plogp_count} seeds of "
        "MOSES test_scaffolds; the published figures over ZINC250k's 800 molecules of lowest penalized logP, which is "
        "not available here: not the same molecules, nor equally low ones.",
        "",
        "| model | seeds | improvement, >= 0.4 | success, >= 0.4 | improvement, >= 0.6 | success, >= 0.6 |",
        "|---|---:|---:|---:|---:|---:|",
        f"| megamolbart, served: CMA-ES | {plogp_count} | {figure(figures['plogP improvement, similarity >= 0.4'], 2)} "
        f"| {_percent(figures['plogP success, similarity >= 0.4'])} "
        f"| {figure(figures['plogP improvement, similarity >= 0.6'], 2)} "
        f"| {_percent(figures['plogP success, similarity >= 0.6'])} |",
        *(
            f"| {name} (published) | 800 | {at_4:.2f} | | {at_6:.2f} | |"
            for name, (at_4, at_6) in record["published"]["plogP"].items()
        ),
        "",
        f"Each request's time on this CPU ({record['cpu']}), one request at a time:",
        "",
        "| request | requests | median s | range s | total s |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {kind} | {timed['requests']} | {figure(timed['median_s'], 1)} | "
            f"{figure(timed['min_s'], 1)}–{figure(timed['max_s'], 1)} | {timed['total_s']:.1f} |"
            for kind, timed in record["timing"].items()
        ),
        "",
        f"The whole step took {steps['whole step']:g} s: selecting the seeds {steps['selecting seeds']:g} s (every "
        f"test_scaffolds molecule's penalized logP), starting the service {steps['starting the service']:g} s, "
        "then the requests above and a warm-up.",
        END,
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
