"""The output file, written as rows come, one batch at a time (memory stays flat), then renamed into place.

Parquet (list columns for vectors and matrices), CSV or TSV for flat rows (scores, SMILES), and `.npz` for
embeddings: `ids` and `embeddings` [n, dim] (or [n, layers, dim]). A resumed job writes the rows an earlier run
journaled first, then goes on: the bytes depend on the rows alone, not on where a run was cut. Parquet row groups
have a size fixed by the first row; `.npz` entries a fixed date.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

OUTPUT_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "tsv", ".npz": "npz"}
ROW_GROUP_BYTES = 4 * 1024 * 1024
"""About the bytes of one Parquet row group: what the writer holds at once, for a million rows or ten thousand."""
FIXED_DATE = (1980, 1, 1, 0, 0, 0)


def output_format(path: Path) -> str:
    fmt = OUTPUT_SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: write .parquet, .csv, .tsv or .npz")
    return fmt


class Output:
    """Rows into `path`'s format, written beside it (`path.tmp`) and renamed into place by `close`."""

    def __init__(self, path: Path, schema: pa.Schema, metadata: dict[str, str] | None = None) -> None:
        self.path, self.schema = path, schema.with_metadata(metadata) if metadata else schema
        self.temporary = path.with_name(path.name + ".tmp")

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._finish()
        os.replace(self.temporary, self.path)

    def __enter__(self) -> Output:
        return self

    def __exit__(self, failed: type[BaseException] | None, *_: object) -> None:
        """On success, nothing (the caller closes when it is done); on an error, the temporary files are removed."""
        if failed is not None:
            for path in self._temporaries():
                path.unlink(missing_ok=True)

    def _temporaries(self) -> list[Path]:
        return [self.temporary]


def open_output(path: Path, schema: pa.Schema, metadata: dict[str, str] | None = None) -> Output:
    outputs = {"parquet": ParquetOutput, "csv": DelimitedOutput, "tsv": DelimitedOutput, "npz": NpzOutput}
    return outputs[output_format(path)](path, schema, metadata)


class ParquetOutput(Output):
    """Row groups of a fixed number of rows (ROW_GROUP_BYTES over the first row's bytes), whatever the batches."""

    def __init__(self, path: Path, schema: pa.Schema, metadata: dict[str, str] | None = None) -> None:
        super().__init__(path, schema, metadata)
        self._writer = pq.ParquetWriter(self.temporary, self.schema)
        self._group_rows = 0
        self._held: list[pa.RecordBatch] = []
        self._held_rows = 0

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        batches = rows.to_batches() if isinstance(rows, pa.Table) else [rows]
        for batch in batches:
            if not batch.num_rows:
                continue
            if not self._group_rows:
                self._group_rows = max(1, min(65_536, ROW_GROUP_BYTES // max(1, batch.slice(0, 1).nbytes)))
            self._held.append(batch.replace_schema_metadata(self.schema.metadata))
            self._held_rows += batch.num_rows
            while self._held_rows >= self._group_rows:  # slices of tables of batches: no copy
                table = pa.Table.from_batches(self._held, schema=self.schema)
                self._writer.write_table(table.slice(0, self._group_rows), row_group_size=self._group_rows)
                rest = table.slice(self._group_rows)
                self._held, self._held_rows = rest.to_batches(), rest.num_rows

    def _finish(self) -> None:
        if self._held_rows or not self._group_rows:
            table = pa.Table.from_batches(self._held, schema=self.schema)
            self._writer.write_table(table, row_group_size=max(1, self._group_rows))
        self._writer.close()


class DelimitedOutput(Output):
    def __init__(self, path: Path, schema: pa.Schema, metadata: dict[str, str] | None = None) -> None:
        super().__init__(path, schema)
        options = pacsv.WriteOptions(delimiter="\t" if output_format(path) == "tsv" else ",", quoting_style="needed")
        self._writer = pacsv.CSVWriter(str(self.temporary), schema, write_options=options)

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        self._writer.write(rows.replace_schema_metadata(None))

    def _finish(self) -> None:
        self._writer.close()


class NpzOutput(Output):
    """`ids` and `embeddings` as .npy entries of a zip. Their shapes are known at the end only: the values go to two
    side files as they come, and into the zip, streamed, at `close`."""

    def __init__(self, path: Path, schema: pa.Schema, metadata: dict[str, str] | None = None) -> None:
        super().__init__(path, schema)
        self._ids_path = path.with_name(path.name + ".ids.tmp")
        self._values_path = path.with_name(path.name + ".values.tmp")
        self._ids: BinaryIO = self._ids_path.open("wb")
        self._values: BinaryIO = self._values_path.open("wb")
        self._rows, self._id_length, self._shape = 0, 1, None

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        if not rows.num_rows:
            return
        ids = rows.column(0).to_pylist()
        self._ids.write("".join(json.dumps(identifier) + "\n" for identifier in ids).encode())
        self._id_length = max(self._id_length, *(len(identifier) for identifier in ids))
        values = stacked(rows.column(1))
        self._shape = self._shape or values.shape[1:]
        self._values.write(values.tobytes())
        self._rows += rows.num_rows

    def _finish(self) -> None:
        self._ids.close()
        self._values.close()
        shape = self._shape or (0,)
        with zipfile.ZipFile(self.temporary, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            with self._entry(archive, "ids.npy", np.dtype(f"<U{self._id_length}"), (self._rows,)) as entry:
                with self._ids_path.open("rb") as ids:
                    for lines in iter(lambda: ids.readlines(1 << 20), []):
                        entry.write(np.asarray([json.loads(line) for line in lines], f"<U{self._id_length}").tobytes())
            with self._entry(archive, "embeddings.npy", np.dtype("<f4"), (self._rows, *shape)) as entry:
                with self._values_path.open("rb") as values:
                    shutil.copyfileobj(values, entry, 1 << 20)
        self._ids_path.unlink()
        self._values_path.unlink()

    def _temporaries(self) -> list[Path]:
        return [self.temporary, self._ids_path, self._values_path]

    @staticmethod
    def _entry(archive: zipfile.ZipFile, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> BinaryIO:
        entry = archive.open(zipfile.ZipInfo(name, date_time=FIXED_DATE), "w", force_zip64=True)
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_2_0(entry, header)
        return entry


def stacked(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A list (or list of lists) column of equal-shaped float rows as one [rows, ...] little-endian float32 array,
    without a Python float in between."""
    whole = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not len(whole):
        return np.zeros((0,), "<f4")
    shape, flat = [], whole
    while pa.types.is_list(flat.type):
        shape.append(len(flat[0]))
        flat = flat.flatten()
    return flat.to_numpy(zero_copy_only=False).astype("<f4", copy=False).reshape(-1, *shape)
