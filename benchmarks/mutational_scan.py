"""The deep mutational scan of issue 29 (item 7): every single substitution of one protein scored by masked marginal
(Meier et al. 2021) on esm2nv, timed three ways on the same weights.

    python -m benchmarks.mutational_scan [--lengths 100 300 1000] [--service-url http://127.0.0.1:3000] [--repeats 1]

A protein of N residues takes N model passes (copy i with residue i masked) and gives 19N scores: at the masked
position, log p(amino acid) - log p(wild type), log-softmax over the whole vocabulary. Contenders:
- transformers: EsmForMaskedLM in torch eager with sdpa, 8 masked copies a batch, torch's default threads; the
  reference every other matrix is held against.
- esm-cpp 0.2.1 FP32 on the same weights (benchmarks.esm_cpp), 8 copies a `forward_batch` call. Its logits are
  checked against transformers' first, on proteins with and without masks; past 1e-3 it is not timed. Its INT8 path
  is an extra line, held to the ranking of the variants rather than to the values: quantized logits are approximate
  by design.
- the service: one POST /score with `scan: true`, where --service-url names a running one (it is not started here).
A contender whose matrix is further from transformers' than its tolerance has no speed reported. Each repeat runs the
contenders in turn, in alternating order, so a machine whose speed drifts weighs on each alike; the best time counts.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import requests
import torch
from transformers import AutoTokenizer, EsmForMaskedLM, PreTrainedTokenizerBase

from benchmarks.accuracy import ESM_CPP_LOGITS_TOLERANCE as LOGITS_TOLERANCE
from benchmarks.torch_esm import CHECKPOINT
from benchmarks.workload import MODEL, protein
from bionemo_serving.exporter.quantize import spearman
from bionemo_serving.runtimes.choice import cpu_model

ALPHABET = "ACDEFGHIKLMNPQRSTVWY"
"""The matrix's columns, in the issue's order; the service's answer is put in it by the `alphabet` it names."""
COPIES_PER_BATCH = 8
SEED = 29
PARITY_LENGTHS = (30, 120, 300)
"""Proteins the esm-cpp logits are checked on before any scan, each as it is and with a sixth of its residues masked."""
SERVICE_TIMEOUT_S = 3600
TRANSFORMERS, ESM_CPP_FP32, ESM_CPP_INT8, SERVICE = "transformers", "esm-cpp FP32", "esm-cpp INT8", "service"
TARGETS = {TRANSFORMERS: 1.5, ESM_CPP_FP32: 2.0}
"""The issue's targets: the service's scores/s over each of these contenders'."""

Logits = Callable[[np.ndarray], np.ndarray]
"""Token ids [batch, length] to logits [batch, length, vocabulary]."""


@dataclass(frozen=True)
class Tolerance:
    """How close a contender's matrix must come to transformers' for its time to count."""

    max_diff: float = math.inf
    min_rank_correlation: float = -1.0

    def refusal(self, max_diff: float, rank_correlation: float) -> str:
        """Why the matrix does not count, or "" when it does."""
        if not max_diff <= self.max_diff:  # NaN fails too
            return f"wrong scores: max |diff| {max_diff:.2e} > {self.max_diff:g}"
        if not rank_correlation >= self.min_rank_correlation:
            return f"wrong ranking: Spearman {rank_correlation:.4f} < {self.min_rank_correlation:g}"
        return ""


TOLERANCES = {
    TRANSFORMERS: Tolerance(),
    ESM_CPP_FP32: Tolerance(max_diff=LOGITS_TOLERANCE),
    ESM_CPP_INT8: Tolerance(min_rank_correlation=0.99),
    SERVICE: Tolerance(max_diff=1e-4),
}


class Scanner(Protocol):
    def scan(self, sequence: str) -> np.ndarray:
        """The [residues][20] masked-marginal matrix, columns in ALPHABET's order."""

    def warm(self, sequence: str) -> None:
        """One batch of masked copies of the sequence's length: first-call costs stay out of the timed scan."""


@dataclass(frozen=True)
class ContenderScan:
    """One contender's scan of one protein: its best time over the repeats and how close its matrix came to
    transformers'. `refused` says why its time does not count, empty when it does."""

    contender: str
    seconds: float
    max_diff: float
    rank_correlation: float
    refused: str = ""


@dataclass(frozen=True)
class LengthScan:
    residues: int
    contenders: dict[str, ContenderScan]
    load: tuple[float, float]
    """The 1-minute load average before and after: above the threads, other work shared the CPU with the scans."""

    @property
    def scores(self) -> int:
        """The non-trivial scores: every residue to each of the 19 other amino acids."""
        return (len(ALPHABET) - 1) * self.residues

    def seconds(self, contender: str) -> float | None:
        """The contender's time, where it counts: None where it did not scan or its matrix was refused."""
        scanned = self.contenders.get(contender)
        return None if scanned is None or scanned.refused else scanned.seconds

    def scores_per_second(self, contender: str) -> float | None:
        seconds = self.seconds(contender)
        return None if seconds is None else self.scores / seconds

    def speedup(self, contender: str, over: str) -> float | None:
        """`contender`'s scores/s over `over`'s; None where either has no counted time."""
        mine, theirs = self.scores_per_second(contender), self.scores_per_second(over)
        return None if mine is None or theirs is None else mine / theirs


@dataclass(frozen=True)
class ScanRun:
    """Everything one run measured, for the printout here and for the make bench report (docs/benchmarks-<cpu>.md)."""

    cpu: str
    torch_threads: int
    esm_cpp_threads: int
    repeats: int
    logits_parity: dict[str, float]
    """Each esm-cpp path's max |logit diff| from transformers' on the PARITY_LENGTHS proteins."""
    refused: dict[str, str]
    """Contenders left out before any scan, and why."""
    scans: list[LengthScan]

    @classmethod
    def from_json(cls, fields: dict) -> ScanRun:
        """A run as a record holds it (dataclasses.asdict): make bench's report is rendered from its JSON."""
        scans = [
            LengthScan(
                scan["residues"],
                {name: ContenderScan(**contender) for name, contender in scan["contenders"].items()},
                tuple(scan["load"]),
            )
            for scan in fields["scans"]
        ]
        return cls(**{**fields, "scans": scans})


class LocalScan:
    """The scan as a user of an in-process engine writes it: tokenize, mask each residue in turn, run the copies
    COPIES_PER_BATCH at a time (equal lengths, no padding), log-softmax at the masked positions."""

    def __init__(self, logits: Logits, tokenizer: PreTrainedTokenizerBase) -> None:
        self.logits, self.tokenizer = logits, tokenizer
        self.columns = np.array(tokenizer.convert_tokens_to_ids(list(ALPHABET)))

    def copies(self, sequence: str) -> np.ndarray:
        """[N, N + 2] token ids: copy i has residue i (token i + 1, after <cls>) masked."""
        ids = np.array(self.tokenizer(sequence)["input_ids"], dtype=np.int64)
        copies = np.repeat(ids[None], len(sequence), axis=0)
        copies[np.arange(len(sequence)), np.arange(1, len(sequence) + 1)] = self.tokenizer.mask_token_id
        return copies

    def masked_log_probs(self, copies: np.ndarray, first: int) -> np.ndarray:
        """[batch, vocabulary] log-probabilities at each copy's masked position; copy j masks residue first + j."""
        rows = np.arange(len(copies))
        logits = self.logits(copies)[rows, first + rows + 1].astype(np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))

    def scan(self, sequence: str) -> np.ndarray:
        copies = self.copies(sequence)
        log_probs = np.concatenate(
            [
                self.masked_log_probs(copies[first : first + COPIES_PER_BATCH], first)
                for first in range(0, len(copies), COPIES_PER_BATCH)
            ]
        )
        residues = np.array(self.tokenizer(sequence)["input_ids"][1:-1])  # not a copy's: each has one residue masked
        wild_type = log_probs[np.arange(len(sequence)), residues]
        return (log_probs[:, self.columns] - wild_type[:, None]).astype(np.float32)

    def warm(self, sequence: str) -> None:
        self.logits(self.copies(sequence)[:COPIES_PER_BATCH])


class TransformersLogits:
    """EsmForMaskedLM in torch eager with sdpa: what a protein engineer without this service runs."""

    def __init__(self, model: EsmForMaskedLM) -> None:
        self.model = model

    @torch.inference_mode()
    def __call__(self, ids: np.ndarray) -> np.ndarray:
        return self.model(input_ids=torch.from_numpy(ids)).logits.numpy()


class ServiceError(Exception):
    """The service refused a request or broke /score's contract: its line says so in place of a time."""


FAILURES = (ServiceError, requests.RequestException)
"""What a contender may fail with and the run go on: only the service, whose limits may refuse a long scan."""


class ServiceScan:
    """POST /score with `scan: true`: the service batches the masked copies itself."""

    def __init__(self, url: str) -> None:
        self.url, self.session = url.rstrip("/"), requests.Session()

    def post(self, body: dict[str, object]) -> dict[str, object]:
        answer = self.session.post(f"{self.url}/score", json={"model": MODEL, **body}, timeout=SERVICE_TIMEOUT_S)
        if answer.status_code != 200:
            raise ServiceError(f"POST /score answered {answer.status_code}: {answer.text[:300]}")
        return answer.json()

    def scan(self, sequence: str) -> np.ndarray:
        answer = self.post({"sequence": sequence, "scan": True})
        alphabet = str(answer["alphabet"])
        scores = np.asarray(answer["scores"], dtype=np.float32)
        if answer["method"] != "masked-marginal" or sorted(alphabet) != sorted(ALPHABET):
            raise ServiceError(f"POST /score answered method {answer['method']!r}, alphabet {alphabet!r}")
        if scores.shape != (len(sequence), len(ALPHABET)):
            raise ServiceError(f"POST /score answered a {scores.shape} matrix for {len(sequence)} residues")
        return scores[:, [alphabet.index(letter) for letter in ALPHABET]]

    def warm(self, sequence: str) -> None:
        """Single mutants of the first residues: a batch of masked copies of the scan's length."""
        mutants = [
            f"{wild}{position}{'C' if wild == 'A' else 'A'}"
            for position, wild in enumerate(sequence[:COPIES_PER_BATCH], start=1)
        ]
        self.post({"sequence": sequence, "mutations": mutants})


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def logits_parity(reference: Logits, contender: Logits, tokenizer: PreTrainedTokenizerBase) -> float:
    """Max |logit diff| over PARITY_LENGTHS proteins, each alone and with a sixth of its residues masked (ESM-2
    rescales its embeddings by the share of masks, so masked inputs are checked too)."""
    rng = random.Random(SEED)
    worst = 0.0
    for length in PARITY_LENGTHS:
        ids = np.array(tokenizer(protein(rng, length))["input_ids"], dtype=np.int64)
        masked = ids.copy()
        masked[1 + np.array(rng.sample(range(length), length // 6))] = tokenizer.mask_token_id
        for batch in (ids[None], masked[None]):
            worst = max(worst, float(np.abs(contender(batch) - reference(batch)).max()))
    return worst


def rank_correlation(scores: np.ndarray, reference: np.ndarray, sequence: str) -> float:
    """Spearman's correlation of the 19N non-trivial scores: how well a contender orders the variants."""
    mutants = np.array(list(ALPHABET)) != np.array(list(sequence))[:, None]
    return spearman(scores[mutants], reference[mutants])


def scan_length(scanners: dict[str, Scanner], residues: int, repeats: int) -> LengthScan:
    """Every contender's best time over the repeats on one fixed-seed protein, checked against transformers'."""
    sequence = protein(random.Random(SEED + residues), residues)
    load_before = os.getloadavg()[0]
    seconds: dict[str, list[float]] = {name: [] for name in scanners}
    matrices: dict[str, list[np.ndarray]] = {name: [] for name in scanners}
    failed: dict[str, str] = {}
    for name, scanner in scanners.items():
        try:
            scanner.warm(sequence)
        except FAILURES as error:
            failed[name] = f"failed: {error}"
    for repeat in range(repeats):
        for name in list(scanners) if repeat % 2 == 0 else list(reversed(scanners)):
            if name in failed:
                continue
            started = time.perf_counter()
            try:
                matrices[name].append(scanners[name].scan(sequence))
            except FAILURES as error:
                failed[name] = f"failed: {error}"
                continue
            seconds[name].append(time.perf_counter() - started)
            log(f"{residues} residues, {name}: {seconds[name][-1]:.2f} s")
    for name, why in failed.items():
        log(f"{residues} residues, {name}: {why}")
    reference = matrices[TRANSFORMERS][0]
    contenders = {
        name: ContenderScan(name, math.nan, math.nan, math.nan, failed[name])
        if name in failed
        else judged(name, min(seconds[name]), matrices[name], reference, sequence)
        for name in scanners
    }
    return LengthScan(residues, contenders, (load_before, os.getloadavg()[0]))


def judged(
    name: str, seconds: float, matrices: list[np.ndarray], reference: np.ndarray, sequence: str
) -> ContenderScan:
    """A contender's time with the worst of its matrices' distances from transformers', refused past its tolerance."""
    max_diff = max(float(np.abs(matrix - reference).max()) for matrix in matrices)
    correlation = min(rank_correlation(matrix, reference, sequence) for matrix in matrices)
    return ContenderScan(name, seconds, max_diff, correlation, TOLERANCES[name].refusal(max_diff, correlation))


def measure(lengths: list[int], service_url: str | None = None, repeats: int = 1) -> ScanRun:
    """The scan of a protein of each length by every contender; what `make bench` calls. esm-cpp (the bench extra) is
    imported here, not with the module: the report reads a scan's record without it."""
    from benchmarks.esm_cpp import EsmCppLogits, convert

    tokenizer = AutoTokenizer.from_pretrained(CHECKPOINT)
    model = EsmForMaskedLM.from_pretrained(CHECKPOINT, attn_implementation="sdpa").eval()
    reference = TransformersLogits(model)
    with tempfile.TemporaryDirectory(prefix="esm-cpp-") as folder:
        weights = convert(model, Path(folder))
        engines = {ESM_CPP_FP32: EsmCppLogits(weights), ESM_CPP_INT8: EsmCppLogits(weights, int8=True)}
        parity = {name: logits_parity(reference, engine, tokenizer) for name, engine in engines.items()}
        log("esm-cpp's max |logit diff| from transformers: " + ", ".join(f"{n} {d:.2e}" for n, d in parity.items()))
        refused = {}
        if not parity[ESM_CPP_FP32] < LOGITS_TOLERANCE:
            refused[ESM_CPP_FP32] = f"logits differ from transformers' by {parity[ESM_CPP_FP32]:.2e}"
        scanners: dict[str, Scanner] = {TRANSFORMERS: LocalScan(reference, tokenizer)}
        scanners |= {name: LocalScan(engine, tokenizer) for name, engine in engines.items() if name not in refused}
        if service_url:
            scanners[SERVICE] = ServiceScan(service_url)
        scans = [scan_length(scanners, residues, repeats) for residues in lengths]
    return ScanRun(cpu_model(), torch.get_num_threads(), EsmCppLogits.threads(), repeats, parity, refused, scans)


def _figure(value: float | None, form: str) -> str:
    return "–" if value is None or math.isnan(value) else format(value, form)


def lines(run: ScanRun) -> list[str]:
    """The run as markdown: per length a table of the contenders, then the service's speed-ups against the targets."""
    out = [
        (
            f"Deep mutational scan (masked marginal, {MODEL}), {run.cpu}; torch {run.torch_threads} threads, "
            f"esm-cpp {run.esm_cpp_threads}; best of {run.repeats}; {COPIES_PER_BATCH} masked copies a batch."
        ),
        "esm-cpp's max |logit diff| from transformers: "
        + ", ".join(f"{name} {diff:.2e}" for name, diff in run.logits_parity.items()),
    ]
    out += [f"{name}: not timed, {why}" for name, why in run.refused.items()]
    for scan in run.scans:
        out += [
            "",
            f"{scan.residues} residues, {scan.scores:,} scores; load average {scan.load[0]:.1f} to {scan.load[1]:.1f}",
            "",
            "| contender | seconds | scores/s | max abs diff | Spearman | note |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for name, scanned in scan.contenders.items():
            out.append(
                f"| {name} | {_figure(scan.seconds(name), '.2f')} | {_figure(scan.scores_per_second(name), ',.0f')} "
                f"| {_figure(scanned.max_diff, '.2e')} | {_figure(scanned.rank_correlation, '.5f')} "
                f"| {scanned.refused} |"
            )
        if SERVICE in scan.contenders:
            for over, target in TARGETS.items():
                speedup = scan.speedup(SERVICE, over)
                out.append(f"service / {over}: {_figure(speedup, '.2f')}x (target >= {target:g}x)")
    return out + _growth(run)


def _growth(run: ScanRun) -> list[str]:
    """Seconds per scan by length, side by side: how each contender's time grows with the protein."""
    if len(run.scans) < 2:
        return []
    out = ["", "| seconds | " + " | ".join(f"{scan.residues} residues" for scan in run.scans) + " |"]
    out.append("|---|" + "---:|" * len(run.scans))
    for name in run.scans[0].contenders:
        out.append(f"| {name} | " + " | ".join(_figure(scan.seconds(name), ".2f") for scan in run.scans) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[100, 300, 1000], help="residues of each protein")
    parser.add_argument("--service-url", help="a running service to scan with; without it the service is skipped")
    parser.add_argument("--repeats", type=int, default=1, help="scans per contender and length; the best counts")
    args = parser.parse_args(argv)
    print("\n".join(lines(measure(args.lengths, args.service_url, args.repeats))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
