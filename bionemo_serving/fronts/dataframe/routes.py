"""The DataFrame dialect's route: POST /embed/dataframe, a table of proteins in, a table of their embeddings out.

What `bentoml.batch.run_in_spark` calls (docs/spark.md): each Spark task sends its partition's Arrow record batches
(up to spark.sql.execution.arrow.maxRecordsPerBatch rows, 10,000 by default) through BentoML's HTTP client, as
Parquet, and turns each answer back into an Arrow batch. A thin adapter over the engine, like the other fronts: the
rows become `EmbedInput`s of at most BIONEMO_MAX_SEQUENCES_PER_REQUEST sequences each, so that the engine's limit
holds for every call it answers and a frame of any number of rows is embedded; the engine's errors name the row at
fault as the frame has it (`rows[3].sequence`, with the row's id), not as the chunk did (`sequences[1]`).

The columns: `id` (strings or integers, one type for the frame, answered as sent) and `sequence` in; `id` and
`embedding` (float32, the mean of the residues' final hidden states, /embed's default) out, in the rows' order.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from bionemo_serving.engine.engine import Engine
from bionemo_serving.engine.inputs import EmbedInput
from bionemo_serving.errors import FieldProblem, InvalidRequest, ServiceError
from bionemo_serving.fronts.bentoml.endpoints import Endpoints
from bionemo_serving.model_catalog import DEFAULT_MODEL
from bionemo_serving.fronts.dataframe.tables import DataFrameOutput, ValidatedDataFrame, rows_at_fault

if TYPE_CHECKING:
    import pandas as pd

INPUT_COLUMNS = ("id", "sequence")
OUTPUT_COLUMNS = ("id", "embedding")
CALLS_IN_FLIGHT = 2
"""Engine calls one frame keeps in flight: while one call's last chunks finish, the next one's are at Triton (each
call keeps its own four chunks in flight, bionemo_serving/engine/graphs.py)."""
INT64 = (-(2**63), 2**63 - 1)
PANDAS_NULLS = ("NAType", "NaTType")
_ID_KINDS = {"string": "a string", "integer": "an integer"}
_ENGINE_FIELD = re.compile(r"sequences\[(\d+)\](.*)")


def _is_null(value: Any) -> bool:
    """None, NaN, or pandas' NA and NaT: what a frame holds where a row has no value."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or type(value).__name__ in PANDAS_NULLS


def _id_kind(value: Any) -> str | None:
    """'string' or 'integer' (within int64, what Parquet and Spark's LongType hold), None for any other value."""
    if isinstance(value, str):
        return "string"
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return "integer" if INT64[0] <= int(value) <= INT64[1] else None
    return None


def frame_rows(frame: pd.DataFrame) -> tuple[list[Any], list[str]]:
    """The ids and sequences of `frame`'s rows; an `InvalidRequest` naming each column missing or unknown, else each
    row at fault (`rows[i].id`, `rows[i].sequence`), at most MAX_ROW_PROBLEMS of them."""
    columns = [str(column) for column in frame.columns]
    problems = [
        FieldProblem(column, f"column missing; the frame's columns are {' and '.join(INPUT_COLUMNS)}")
        for column in INPUT_COLUMNS
        if column not in columns
    ]
    problems += [
        FieldProblem(column, f"unknown column; the frame's columns are {' and '.join(INPUT_COLUMNS)}")
        for column in dict.fromkeys(columns)
        if column not in INPUT_COLUMNS or columns.count(column) > 1
    ]
    if problems:
        raise InvalidRequest(problems)
    ids, sequences = frame["id"].tolist(), frame["sequence"].tolist()
    first = next((row for row, identifier in enumerate(ids) if _id_kind(identifier)), None)
    first_kind = None if first is None else _id_kind(ids[first])
    for row, (identifier, sequence) in enumerate(zip(ids, sequences)):
        kind = None if _is_null(identifier) else _id_kind(identifier)
        if _is_null(identifier):
            problems.append(FieldProblem(f"rows[{row}].id", "is missing (null)"))
        elif kind is None:
            problems.append(FieldProblem(f"rows[{row}].id", "should be a string or an integer (int64)"))
        elif kind != first_kind:
            mixed = f"is {_ID_KINDS[kind]}, where rows[{first}].id is {_ID_KINDS[first_kind]}: ids are of one type"
            problems.append(FieldProblem(f"rows[{row}].id", mixed))
        if _is_null(sequence):
            problems.append(FieldProblem(f"rows[{row}].sequence", f"is missing (null){_of(identifier)}"))
        elif not isinstance(sequence, str):
            problems.append(FieldProblem(f"rows[{row}].sequence", f"should be a string{_of(identifier)}"))
    if problems:
        raise rows_at_fault(problems)
    return ids, sequences


def _of(identifier: Any) -> str:
    """' (id ...)', to follow a message about a row; nothing where the row has no usable id."""
    return "" if _is_null(identifier) or _id_kind(identifier) is None else f" (id {identifier!r})"


def _at_rows(error: ServiceError, rows: Sequence[int], ids: Sequence[Any]) -> ServiceError:
    """The engine's error about a chunk's `sequences[i]` as the frame's `rows[row].sequence`, with the row's id."""
    problems = []
    for problem in error.problems:
        named = _ENGINE_FIELD.fullmatch(problem.field)
        if named is None:
            problems.append(problem)
            continue
        row = rows[int(named.group(1))]
        problems.append(FieldProblem(f"rows[{row}].sequence{named.group(2)}", f"{problem.message}{_of(ids[row])}"))
    return type(error)(problems)


async def embed_rows(engine: Engine, sequences: Sequence[str], ids: Sequence[Any]) -> np.ndarray:
    """[rows, dim] float32: each sequence's embedding, in the rows' order, from engine calls of at most the engine's
    limit of sequences each. The rows go longest first: each call holds rows of about one length (little padding),
    and a row over the model's limit is refused before the others are computed."""
    order = sorted(range(len(sequences)), key=lambda row: len(sequences[row]), reverse=True)
    size = engine.limits.max_sequences
    chunks = [order[start : start + size] for start in range(0, len(order), size)]
    in_flight = asyncio.Semaphore(CALLS_IN_FLIGHT)

    async def embed(rows: list[int]) -> np.ndarray:
        async with in_flight:
            asked = EmbedInput([sequences[row] for row in rows], DEFAULT_MODEL, truncate=None)
            try:
                return (await engine.embed(asked)).vectors
            except ServiceError as error:
                raise _at_rows(error, rows, ids) from None

    calls = [asyncio.ensure_future(embed(rows)) for rows in chunks]
    try:
        answers = await asyncio.gather(*calls)
    finally:
        for call in calls:  # the first error ends the frame: the calls still waiting or running are cancelled
            call.cancel()
    vectors = np.empty((len(sequences), answers[0].shape[-1]), dtype=np.float32)
    for rows, answer in zip(chunks, answers):
        vectors[rows] = answer
    return vectors


def embeddings_frame(ids: list[Any], vectors: np.ndarray | None) -> pd.DataFrame:
    """The answer: `id` as sent, `embedding` one float32 array per row (Parquet's list<float>, Spark's
    ArrayType(FloatType())); None: a frame of no rows."""
    import pandas as pd

    embeddings = list(vectors) if vectors is not None else pd.Series([], dtype=object)
    return pd.DataFrame({"id": pd.Series(ids, dtype=None if ids else object), "embedding": embeddings})


def mount(endpoint: Endpoints, engine: Engine, max_request_bytes: int) -> None:
    """Register /embed/dataframe; bodies over `max_request_bytes` (Parquet: its data uncompressed) are refused (413)."""

    @endpoint(
        "/embed/dataframe",
        ValidatedDataFrame(
            orient="records", columns=list(INPUT_COLUMNS), dtype={"id": "str", "sequence": "str"},
            default_format="parquet", max_bytes=max_request_bytes,
        ),
        DataFrameOutput(orient="records", columns=list(OUTPUT_COLUMNS), default_format="parquet"),
        model=DEFAULT_MODEL,
    )  # fmt: skip
    async def embed_dataframe(frame: pd.DataFrame) -> pd.DataFrame:
        """A table of proteins (id, sequence) in, their esm2nv embeddings (id, embedding: float32) out, as Parquet."""
        ids, sequences = frame_rows(frame)
        if not ids:
            return embeddings_frame([], None)
        return embeddings_frame(ids, await embed_rows(engine, sequences, ids))
