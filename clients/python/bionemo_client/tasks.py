"""The commands, one description each: the requests a chunk of records becomes, and the rows its answers become.

The job (jobs.py) does the rest the same way for every command: chunks, requests in flight, retries, order, the
journal that resume reads, the output file. Floats come back as base64 (`encoding_format`), several times cheaper
to send and parse than JSON numbers.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from bionemo_client.records import Record
from bionemo_client.service import Problem

FLOATS = pa.list_(pa.float32())
MATRIX = pa.list_(FLOATS)
SINGLE_MUTATION = re.compile(r"^([A-Za-z])(\d+)([A-Za-z])$")
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
"""The last axis of /logits, in the service's order (its `alphabet`)."""


def _floats(encoded: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(encoded), dtype="<f4").astype(np.float32, copy=False)


def _list_column(rows: Sequence[np.ndarray]) -> pa.Array:
    """One list<float32> per vector, or list<list<float32>> per matrix, built from the arrays without Python floats."""
    if rows and rows[0].ndim == 2:
        inner = _list_column([vector for matrix in rows for vector in matrix])
        offsets = np.cumsum([0, *(len(matrix) for matrix in rows)], dtype=np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), inner)
    offsets = np.cumsum([0, *(len(vector) for vector in rows)], dtype=np.int32)
    values = np.concatenate(rows) if rows else np.zeros(0, np.float32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.float32()))


@dataclass(frozen=True)
class Task:
    """A command over records. `item_field` is the request's list field that carries the records (a 422 naming
    `sequences[3]` refuses the chunk's fourth record alone); `max_items` and `max_residues` bound one request."""

    model: str
    item_field: ClassVar[str] = "sequences"
    path: ClassVar[str]
    schema: ClassVar[pa.Schema]
    writes: ClassVar[tuple[str, ...]] = ("parquet",)
    """The output formats its rows fit (list columns do not fit CSV)."""
    file_metadata: ClassVar[dict[str, str]] = {}
    """Written into a Parquet output's schema metadata."""
    max_items: int = 64
    max_residues: int = 32_768
    record_fields: ClassVar[tuple[str, ...]] = ()
    """Fields that, refused, refuse the request's one record (a scan's `sequence`), where a request carries one."""

    def requests(self, records: list[Record]) -> list[dict[str, Any]]:
        return [{"model": self.model, self.item_field: [record.text for record in records], **self.options()}]

    def options(self) -> dict[str, Any]:
        """The request's fields besides the model and the records, as sent."""
        return {}

    def blamed(self, problems: list[Problem], count: int) -> dict[int, list[Problem]]:
        """The records (by place in the request's `count`) that the service's `problems` name, with their problems;
        empty where they name something every record shares (the model, an option): the job cannot go on."""
        named: dict[int, list[Problem]] = {}
        for problem in problems:
            item = problem.item(self.item_field)
            if item is None and count == 1 and problem.field.split("[")[0].split(".")[0] in self.record_fields:
                item = 0
            if item is not None and item < count:
                named.setdefault(item, []).append(problem)
        return named

    def rows(self, records: list[Record], answers: list[dict[str, Any]]) -> pa.Table:
        raise NotImplementedError

    def identity(self) -> dict[str, Any]:
        """What makes a job's rows what they are: a journal written under another identity is not resumed."""
        return {"task": type(self).__name__, "model": self.model, **self.options(), "max_items": self.max_items,
                "max_residues": self.max_residues}  # fmt: skip


@dataclass(frozen=True)
class Embed(Task):
    """One vector per record (proteins or SMILES): POST /embed."""

    path: ClassVar[str] = "/embed"
    writes: ClassVar[tuple[str, ...]] = ("parquet", "npz")
    layers: tuple[int, ...] | None = None
    pooling: str = "mean"
    normalize: bool = False

    @property
    def schema(self) -> pa.Schema:  # type: ignore[override]
        return pa.schema([("id", pa.string()), ("embedding", MATRIX if self.layers else FLOATS)])

    def options(self) -> dict[str, Any]:
        asked: dict[str, Any] = {"pooling": self.pooling, "normalize": self.normalize, "encoding_format": "base64"}
        if self.layers:
            asked["layers"] = list(self.layers)
        return asked

    def rows(self, records: list[Record], answers: list[dict[str, Any]]) -> pa.Table:
        (answer,) = answers
        vectors = [_floats(item) for item in answer["embeddings"]]
        if self.layers:
            vectors = [vector.reshape(len(self.layers), answer["dim"]) for vector in vectors]
        return pa.table([pa.array([r.id for r in records], pa.string()), _list_column(vectors)], schema=self.schema)


@dataclass(frozen=True)
class Hidden(Task):
    """Every token's final hidden state (a molecule's latent, which `decode` reads back): POST /hidden."""

    path: ClassVar[str] = "/hidden"
    schema: ClassVar[pa.Schema] = pa.schema([("id", pa.string()), ("hiddens", MATRIX)])

    def options(self) -> dict[str, Any]:
        return {"encoding_format": "base64"}

    def rows(self, records: list[Record], answers: list[dict[str, Any]]) -> pa.Table:
        (answer,) = answers
        states = []
        for encoded, mask in zip(answer["hiddens"], answer["mask"]):
            padded = _floats(encoded).reshape(len(mask), answer["dim"])
            states.append(padded[np.asarray(mask, bool)])
        return pa.table([pa.array([r.id for r in records], pa.string()), _list_column(states)], schema=self.schema)


@dataclass(frozen=True)
class Logits(Task):
    """Log-probabilities of the 20 amino acids at every residue: POST /logits; the alphabet is the file's metadata."""

    path: ClassVar[str] = "/logits"
    schema: ClassVar[pa.Schema] = pa.schema([("id", pa.string()), ("log_probs", MATRIX)])
    file_metadata: ClassVar[dict[str, str]] = {"alphabet": AMINO_ACIDS}

    def options(self) -> dict[str, Any]:
        return {"encoding_format": "base64"}

    def rows(self, records: list[Record], answers: list[dict[str, Any]]) -> pa.Table:
        (answer,) = answers
        if answer["alphabet"] != AMINO_ACIDS:
            raise ValueError(f"the service's alphabet {answer['alphabet']!r} is not {AMINO_ACIDS!r}")
        matrices = [_floats(item).reshape(-1, len(AMINO_ACIDS)) for item in answer["log_probs"]]
        return pa.table([pa.array([r.id for r in records], pa.string()), _list_column(matrices)], schema=self.schema)


@dataclass(frozen=True)
class Contacts(Task):
    """Residue-residue contact probabilities, [length, length] per protein: POST /contacts."""

    path: ClassVar[str] = "/contacts"
    schema: ClassVar[pa.Schema] = pa.schema([("id", pa.string()), ("contacts", MATRIX)])
    max_items: int = 8

    def options(self) -> dict[str, Any]:
        return {"encoding_format": "base64"}

    def rows(self, records: list[Record], answers: list[dict[str, Any]]) -> pa.Table:
        (answer,) = answers
        maps = []
        for item in answer["contacts"]:
            values = _floats(item)
            side = math.isqrt(len(values))
            maps.append(values.reshape(side, side))
        return pa.table([pa.array([r.id for r in records], pa.string()), _list_column(maps)], schema=self.schema)


SCAN_SCHEMA = pa.schema(
    [("id", pa.string()), ("position", pa.int32()), ("wild_type", pa.string()), ("mutant", pa.string()),
     ("score", pa.float32())]
)  # fmt: skip


@dataclass(frozen=True)
class Scan(Task):
    """Every single substitution of each protein (POST /score, `scan`), sent `window` residues a request so that
    each fits the service's time; rows in long form: id, position (1-based), wild type, mutant, score. The wild
    type's own column (0 by definition) is not a variant and is not written."""

    path: ClassVar[str] = "/score"
    item_field: ClassVar[str] = "sequence"
    record_fields: ClassVar[tuple[str, ...]] = ("sequence", "scan", "scan_positions")
    schema: ClassVar[pa.Schema] = SCAN_SCHEMA
    writes: ClassVar[tuple[str, ...]] = ("parquet", "csv", "tsv")
    max_items: int = 1
    window: int = 32
    method: str = "masked-marginal"

    def options(self) -> dict[str, Any]:
        return {"method": self.method, "window": self.window}

    def requests(self, records: list[Record]) -> list[dict[str, Any]]:
        (record,) = records
        return [
            {"model": self.model, "sequence": record.text, "scan": True, "method": self.method,
             "scan_positions": [first, min(first + self.window - 1, len(record.text))]}
            for first in range(1, len(record.text) + 1, self.window)
        ]  # fmt: skip

    def rows(self, records: list[Record], answers: list[dict[str, Any]]) -> pa.Table:
        (record,) = records
        columns: dict[str, list[Any]] = {name: [] for name in SCAN_SCHEMA.names}
        for answer in answers:
            first, _ = answer["scan_positions"]
            for offset, scores in enumerate(answer["scores"]):
                position = first + offset
                wild_type = record.text[position - 1].upper()
                for mutant, score in zip(answer["alphabet"], scores):
                    if mutant != wild_type:
                        for name, value in zip(SCAN_SCHEMA.names, (record.id, position, wild_type, mutant, score)):
                            columns[name].append(value)
        return pa.table(columns, schema=SCAN_SCHEMA)


VARIANT_SCHEMA = pa.schema(
    [("id", pa.string()), ("variant", pa.string()), ("position", pa.int32()), ("wild_type", pa.string()),
     ("mutant", pa.string()), ("score", pa.float32())]
)  # fmt: skip


@dataclass(frozen=True)
class Variants(Task):
    """Variants of one wild type, one record each (`A23G`, or `A23G:K45R`): POST /score with `mutations`. Long form:
    id, variant, and for a single substitution its position, wild type and mutant (empty for a multi-mutant)."""

    path: ClassVar[str] = "/score"
    item_field: ClassVar[str] = "mutations"
    schema: ClassVar[pa.Schema] = VARIANT_SCHEMA
    writes: ClassVar[tuple[str, ...]] = ("parquet", "csv", "tsv")
    wild_type: str = ""
    method: str = "masked-marginal"
    max_items: int = 32

    def options(self) -> dict[str, Any]:
        return {"sequence": self.wild_type, "method": self.method}

    def rows(self, records: list[Record], answers: list[dict[str, Any]]) -> pa.Table:
        (answer,) = answers
        columns: dict[str, list[Any]] = {name: [] for name in VARIANT_SCHEMA.names}
        for record, score in zip(records, answer["scores"]):
            single = SINGLE_MUTATION.match(record.text)
            parts = (single.group(2), single.group(1).upper(), single.group(3).upper()) if single else (None,) * 3
            values = (record.id, record.text, int(parts[0]) if parts[0] else None, parts[1], parts[2], score)
            for name, value in zip(VARIANT_SCHEMA.names, values):
                columns[name].append(value)
        return pa.table(columns, schema=VARIANT_SCHEMA)


@dataclass(frozen=True)
class Decode(Task):
    """SMILES back from latents (the `hiddens` a `embed --per-token` of SMILES wrote): POST /decode, greedy."""

    path: ClassVar[str] = "/decode"
    item_field: ClassVar[str] = "hiddens"
    schema: ClassVar[pa.Schema] = pa.schema([("id", pa.string()), ("smiles", pa.string())])
    writes: ClassVar[tuple[str, ...]] = ("parquet", "csv", "tsv")
    max_length: int = 128
    max_items: int = 32

    def options(self) -> dict[str, Any]:
        return {"max_length": self.max_length}

    def requests(self, records: list[Record]) -> list[dict[str, Any]]:
        latents: list[np.ndarray] = [record.text for record in records]  # records.read_latents' records
        width = max(len(latent) for latent in latents)
        hiddens = np.zeros((len(latents), width, latents[0].shape[1]), np.float32)
        mask = np.zeros((len(latents), width), np.int64)
        for row, latent in enumerate(latents):
            hiddens[row, : len(latent)], mask[row, : len(latent)] = latent, 1
        return [{"model": self.model, "hiddens": hiddens.tolist(), "mask": mask.tolist(), **self.options()}]

    def rows(self, records: list[Record], answers: list[dict[str, Any]]) -> pa.Table:
        (answer,) = answers
        return pa.table([[r.id for r in records], answer["smiles"]], schema=self.schema)


GENERATED_SCHEMA = pa.schema(
    [("id", pa.string()), ("seed_smiles", pa.string()), ("sample", pa.int32()), ("smiles", pa.string()),
     ("valid", pa.bool_()), ("canonical", pa.string()), ("tanimoto", pa.float32())]
)  # fmt: skip


@dataclass(frozen=True)
class Generate(Task):
    """New molecules around each seed SMILES: POST /generate; long form, one row per sample. Reproducible with a
    seed: each request gets `seed + its chunk's first record`, so a resumed job sends what an uninterrupted one sent."""

    path: ClassVar[str] = "/generate"
    item_field: ClassVar[str] = "smiles"
    schema: ClassVar[pa.Schema] = GENERATED_SCHEMA
    writes: ClassVar[tuple[str, ...]] = ("parquet", "csv", "tsv")
    num_samples: int = 10
    method: str = "greedy"
    scaled_radius: float = 1.0
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    max_items: int = 16

    def options(self) -> dict[str, Any]:
        asked = {"num_samples": self.num_samples, "method": self.method, "scaled_radius": self.scaled_radius, **self.extra}
        return asked | ({"seed": self.seed} if self.seed is not None else {})

    def requests(self, records: list[Record]) -> list[dict[str, Any]]:
        (body,) = super().requests(records)
        if self.seed is not None:
            body["seed"] = self.seed + records[0].index
        return [body]

    def rows(self, records: list[Record], answers: list[dict[str, Any]]) -> pa.Table:
        (answer,) = answers
        columns: dict[str, list[Any]] = {name: [] for name in GENERATED_SCHEMA.names}
        for record, result in zip(records, answer["results"]):
            for number, sample in enumerate(result["samples"]):
                values = (record.id, result["seed_smiles"], number, sample["smiles"], sample["valid"],
                          sample["canonical"], sample["tanimoto"])  # fmt: skip
                for name, value in zip(GENERATED_SCHEMA.names, values):
                    columns[name].append(value)
        return pa.table(columns, schema=GENERATED_SCHEMA)
