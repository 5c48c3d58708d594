"""What the molecule benchmark (benchmarks/molecules.py) and its property-guided tasks (benchmarks/molecule_tasks.py)
share: the service serving megamolbart alone, its native HTTP API, MOSES test_scaffolds in one fixed order, a run's
record of the machine and the code, and its markdown section in docs/molecules.md."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np
import requests

from benchmarks.overload import service
from benchmarks.processes import Server
from bionemo_serving.model_catalog import DEFAULT_MOLECULE_MODEL, MODELS
from bionemo_serving.preprocessing.smiles import SmilesTokenizer
from bionemo_serving.training.moses_data import Molecules, held_out_molecules

ROOT = Path(__file__).resolve().parent.parent
HELD_OUT = "test_scaffolds"
SELECTION_SEED = 47
"""The permutation of test_scaffolds the molecules are taken from, in order: every run measures the same ones."""
REQUEST_TIMEOUT_S = 600
"""BIONEMO_REQUEST_TIMEOUT_S: a batch that a random-init model decodes to max_length takes long on 2 cores."""
RANDOM_INIT = "random-init default"
"""/models' `weights` of the export `python -m bionemo_serving.exporter defaults` makes: random weights, not a trained model."""
RANDOM_INIT_NOTE = (
    "**Random-init weights, not a trained model: these figures show the benchmark running, not what a trained "
    "megamolbart does; every target is missed, as it must be.**"
)
DEFAULT_DOC = ROOT / "docs" / "molecules.md"


def molecule_service(repository: Path) -> Server:
    """benchmarks.overload's service, serving megamolbart alone, with room for long batches."""
    base = service(repository)
    extra = {"BIONEMO_MODELS": DEFAULT_MOLECULE_MODEL, "BIONEMO_REQUEST_TIMEOUT_S": str(REQUEST_TIMEOUT_S)}
    return dataclasses.replace(base, name="molecules", environment=lambda port: {**base.environment(port), **extra})


@functools.cache
def tokenizable(split: str) -> Molecules:
    """The molecules of a held-out split that megamolbart's tokenizer takes whole."""
    limit = MODELS[DEFAULT_MOLECULE_MODEL].max_length
    return held_out_molecules(split, SmilesTokenizer(limit), limit)


def held_out_order() -> tuple[list[str], dict[str, int]]:
    """test_scaffolds' molecules in SELECTION_SEED's permutation, and how many of the split were read and left out (a
    token outside MegaMolBART's vocabulary): each run takes its molecules from the front of this order."""
    molecules = tokenizable(HELD_OUT)
    order = np.random.default_rng(SELECTION_SEED).permutation(len(molecules.smiles))
    left_out = {"read": molecules.read, "unknown_tokens": molecules.unknown_tokens, "too_long": molecules.too_long}
    return [molecules.smiles[index] for index in order], left_out


class NativeApi:
    """The native HTTP API of the running service; an answer other than 200 stops the run, saying what it was."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.session.post(f"{self.url}{path}", json=body, timeout=REQUEST_TIMEOUT_S + 30)
        if response.status_code != 200:
            raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:2000]}")
        return response.json()

    def models(self) -> dict[str, Any]:
        """GET /models: megamolbart's entry (version, weights, runtimes) and the request limits."""
        response = self.session.get(f"{self.url}/models", timeout=60)
        response.raise_for_status()
        answer = response.json()
        entry = next(model for model in answer["models"] if model["name"] == DEFAULT_MOLECULE_MODEL)
        return {"model": entry, "limits": answer["limits"]}


def figure(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def run_line(record: dict[str, Any]) -> str:
    """The rendered section's first line: the model served, the machine, the date, the commit and the command."""
    model = record["served"]["model"]
    return (
        f"megamolbart v{model['version']} (weights: {model['weights']}), {record['cpu']} ({record['cores']} cores; "
        f"its flags in the JSON), {record['date']}, commit {record['commit']}: `{record['command']}`."
    )
