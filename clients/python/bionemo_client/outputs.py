"""The output file, written from the journal's rows one batch at a time (memory stays flat), then renamed into place.

Parquet (list columns for vectors and matrices), CSV or TSV for flat rows (scores, SMILES), and `.npz` for
embeddings: `ids` and `embeddings` [n, dim] (or [n, layers, dim]). The bytes depend on the rows alone, not on how a
run was cut and resumed: Parquet row groups have a size fixed by the first row, and the `.npz` entries a fixed date.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

OUTPUT_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "tsv", ".npz": "npz"}
ROW_GROUP_BYTES = 32 * 1024 * 1024
FIXED_DATE = (1980, 1, 1, 0, 0, 0)

Batches = Callable[[], Iterator[pa.RecordBatch]]
"""Gives the rows afresh, in order, each time it is called (the journal's segments)."""


def output_format(path: Path) -> str:
    fmt = OUTPUT_SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: write .parquet, .csv, .tsv or .npz")
    return fmt


def write(path: Path, schema: pa.Schema, batches: Batches, metadata: dict[str, str] | None = None) -> None:
    """The rows `batches` gives, as `path`'s format, written beside it and renamed into place."""
    writers = {"parquet": _parquet, "csv": _delimited, "tsv": _delimited, "npz": _npz}
    temporary = path.with_name(path.name + ".tmp")
    writers[output_format(path)](temporary, output_format(path), schema, batches, metadata or {})
    os.replace(temporary, path)


def _parquet(path: Path, fmt: str, schema: pa.Schema, batches: Batches, metadata: dict[str, str]) -> None:
    with pq.ParquetWriter(path, schema.with_metadata(metadata) if metadata else schema) as writer:
        group_rows, held, held_rows = 0, [], 0
        for batch in batches():
            if not group_rows and batch.num_rows:
                group_rows = max(1, min(65_536, ROW_GROUP_BYTES // max(1, batch.slice(0, 1).nbytes)))
            held.append(batch)
            held_rows += batch.num_rows
            while group_rows and held_rows >= group_rows:
                table = pa.Table.from_batches(held, schema=schema)
                writer.write_table(table.slice(0, group_rows).replace_schema_metadata(writer.schema.metadata))
                rest = table.slice(group_rows)
                held, held_rows = rest.to_batches(), rest.num_rows
        if held_rows or not group_rows:
            table = pa.Table.from_batches(held, schema=schema)
            writer.write_table(table.replace_schema_metadata(writer.schema.metadata))


def _delimited(path: Path, fmt: str, schema: pa.Schema, batches: Batches, metadata: dict[str, str]) -> None:
    options = pacsv.WriteOptions(delimiter="\t" if fmt == "tsv" else ",", quoting_style="needed")
    with pacsv.CSVWriter(str(path), schema, write_options=options) as writer:
        for batch in batches():
            writer.write_batch(batch)


def _npz(path: Path, fmt: str, schema: pa.Schema, batches: Batches, metadata: dict[str, str]) -> None:
    """`ids` and `embeddings`, streamed into the zip as .npy entries: one pass for the shapes, one for the values."""
    rows, id_length, shape = 0, 1, None
    for batch in batches():
        rows += batch.num_rows
        if batch.num_rows:
            id_length = max(id_length, max(len(identifier) for identifier in batch.column(0).to_pylist()))
            shape = shape or np.asarray(batch.column(1)[0].as_py(), np.float32).shape
    shape = shape or (0,)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        _npy_entry(archive, "ids.npy", np.dtype(f"<U{id_length}"), (rows,),
                   (np.asarray(batch.column(0).to_pylist(), f"<U{id_length}") for batch in batches()))  # fmt: skip
        _npy_entry(archive, "embeddings.npy", np.dtype("<f4"), (rows, *shape),
                   (_stacked(batch.column(1), shape) for batch in batches()))  # fmt: skip


def _stacked(column: pa.Array, shape: tuple[int, ...]) -> np.ndarray:
    flat = column.flatten()
    while pa.types.is_list(flat.type):
        flat = flat.flatten()
    return flat.to_numpy(zero_copy_only=False).astype("<f4", copy=False).reshape(-1, *shape)


def _npy_entry(
    archive: zipfile.ZipFile, name: str, dtype: np.dtype, shape: tuple[int, ...], parts: Iterator[np.ndarray]
) -> None:
    info = zipfile.ZipInfo(name, date_time=FIXED_DATE)
    with archive.open(info, "w", force_zip64=True) as entry:
        np.lib.format.write_array_header_2_0(entry, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                     "fortran_order": False, "shape": shape})  # fmt: skip
        for part in parts:
            entry.write(np.ascontiguousarray(part, dtype=dtype).tobytes())
